#include "store/step_table_reader.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <stdexcept>
#include <vector>

#include "store/bounded_csv.h"

namespace stackscope {

namespace {

// Cells split on commas, white space around them dropped.
void trim_cells(std::vector<std::string>& cells) {
  for (std::string& cell : cells) {
    cell.erase(0, cell.find_first_not_of(" \t\r"));
    cell.erase(cell.find_last_not_of(" \t\r") + 1);
  }
}

std::string joined(const std::vector<std::string>& cells) {
  std::string out;
  for (size_t i = 0; i < cells.size() && out.size() <= 80; ++i) out += (i ? "," : "") + cells[i];
  return out;
}

int column(const std::vector<std::string>& header, std::initializer_list<const char*> names) {
  for (const char* n : names)
    for (size_t i = 0; i < header.size(); ++i)
      if (header[i] == n) return static_cast<int>(i);
  return -1;
}

}  // namespace

bool looks_like_step_table(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  CsvLineReader reader(in, {});
  std::vector<std::string> h;
  if (reader.next(h, kMaxCsvColumns) != CsvLineReader::Result::line) return false;
  trim_cells(h);
  return column(h, {"worker", "rank"}) >= 0 && column(h, {"time", "step_time", "batch_time_norm"}) >= 0;
}

StepTimeTable read_step_table(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  CsvLineReader reader(in, {});
  auto next_line = [&](std::vector<std::string>& cells, size_t max_cells) {
    const auto result = reader.next(cells, max_cells);
    if (result == CsvLineReader::Result::end) return false;
    if (result != CsvLineReader::Result::line)
      throw std::runtime_error(path + ": row " + std::to_string(reader.line_no()) + ": " + reader.problem());
    trim_cells(cells);
    return true;
  };
  std::vector<std::string> header, cells;
  if (!next_line(header, kMaxCsvColumns))
    throw std::runtime_error(path + ": empty file (expected a header worker,step,time)");
  const int worker_col = column(header, {"worker", "rank"});
  int step_col, value_col;
  if (column(header, {"batch_time_norm"}) >= 0) {  // Alibaba PAI mini-batch-time layout
    step_col = column(header, {"time"});
    value_col = column(header, {"batch_time_norm"});
  } else {
    step_col = column(header, {"step", "iteration"});
    value_col = column(header, {"time", "step_time", "duration"});
  }
  if (worker_col < 0 || step_col < 0 || value_col < 0)
    throw std::runtime_error(path + ": row 1: header needs columns worker, step and time (got " +
                             quote_excerpt(joined(header)) + ")");
  std::map<std::string, std::map<int64_t, std::pair<double, int>>> values;
  // Only the cells up to the last column read are kept.
  const size_t cells_used = static_cast<size_t>(std::max({worker_col, step_col, value_col})) + 1;
  while (next_line(cells, cells_used)) {
    const int64_t row = static_cast<int64_t>(reader.line_no());
    if (reader.blank()) continue;
    auto cell = [&](int c, const char* what) -> const std::string& {
      if (c >= static_cast<int>(cells.size()) || cells[c].empty())
        throw std::runtime_error(path + ": row " + std::to_string(row) + ": column " + std::to_string(c + 1) + " (" +
                                 what + ") is missing");
      return cells[c];
    };
    const std::string& worker = cell(worker_col, "worker");
    int64_t step;
    double value;
    try {
      size_t used = 0;
      step = std::stoll(cell(step_col, "step"), &used);
      if (used != cells[step_col].size()) throw std::invalid_argument("trailing");
      value = std::stod(cell(value_col, "time"), &used);
      if (used != cells[value_col].size()) throw std::invalid_argument("trailing");
    } catch (const std::logic_error&) {
      throw std::runtime_error(path + ": row " + std::to_string(row) + ": step (column " + std::to_string(step_col + 1) +
                               ") must be an integer and time (column " + std::to_string(value_col + 1) +
                               ") a number (got " + quote_excerpt(cells[step_col]) + " and " +
                               quote_excerpt(static_cast<size_t>(value_col) < cells.size() ? cells[value_col] : "") +
                               ")");
    }
    if (!std::isfinite(value) || value < 0)
      throw std::runtime_error(path + ": row " + std::to_string(row) + ": column " + std::to_string(value_col + 1) +
                               ": step time must be a finite non-negative number");
    // A step logged twice (real traces have them) counts once, at the mean of its values.
    auto& cell_value = values[worker][step];
    cell_value.first += value;
    cell_value.second += 1;
  }
  if (values.size() < 2) throw std::runtime_error(path + ": needs step times of at least 2 workers");
  StepTimeTable t;
  std::vector<int64_t> steps;
  for (auto& [w, m] : values)
    for (auto& [s, v] : m) steps.push_back(s);
  std::sort(steps.begin(), steps.end());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  t.steps = steps;
  // Workers in numeric order when their names are numbers ("10" after "9").
  std::vector<std::string> names;
  for (auto& [w, m] : values) names.push_back(w);
  std::stable_sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  for (auto& w : names) {
    t.workers.push_back(w);
    std::vector<double> row_values(steps.size(), std::numeric_limits<double>::quiet_NaN());
    for (auto& [s, v] : values[w])
      row_values[std::lower_bound(steps.begin(), steps.end(), s) - steps.begin()] = v.first / v.second;
    t.time.push_back(std::move(row_values));
  }
  return t;
}

}  // namespace stackscope
