#include "store/numeric_csv.h"

#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>

namespace stackscope {

namespace {
std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}
std::string_view unquote(std::string_view s) {
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') return s.substr(1, s.size() - 2);
  return s;
}
// Splits one line on commas (no quoted commas: the numeric format has none).
void split(std::string_view line, std::vector<std::string_view>& out) {
  out.clear();
  size_t start = 0;
  for (;;) {
    const size_t comma = line.find(',', start);
    out.push_back(trim(line.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
}
}  // namespace

NumericTable parse_numeric_csv(std::string_view text, const std::string& source) {
  NumericTable t;
  std::vector<std::string_view> cells;
  size_t pos = 0, line_no = 0;
  bool header = true;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = trim(text.substr(pos, end - pos));
    pos = end + 1;
    ++line_no;
    if (line.empty()) continue;  // blank lines (a trailing newline) carry nothing
    split(line, cells);
    const std::string where = source + ":" + std::to_string(line_no);
    if (header) {
      for (size_t c = 0; c < cells.size(); ++c) {
        const std::string_view name = trim(unquote(cells[c]));
        if (name.empty()) throw NumericCsvError(where + ": header column " + std::to_string(c + 1) + " has no name");
        t.columns.emplace_back(name);
      }
      header = false;
      continue;
    }
    if (cells.size() != t.columns.size())
      throw NumericCsvError(where + ": " + std::to_string(cells.size()) + " cells, the header has " +
                            std::to_string(t.columns.size()));
    for (size_t c = 0; c < cells.size(); ++c) {
      const std::string_view cell = cells[c];
      double v = 0;
      const char* b = cell.data();
      const char* e = cell.data() + cell.size();
      if (!cell.empty() && *b == '+') ++b;  // from_chars rejects a leading '+'
      const auto r = std::from_chars(b, e, v);
      const std::string col = "column '" + t.columns[c] + "'";
      if (cell.empty()) throw NumericCsvError(where + ", " + col + ": empty cell");
      if (r.ec != std::errc() || r.ptr != e)
        throw NumericCsvError(where + ", " + col + ": '" + std::string(cell) + "' is not a number");
      if (!std::isfinite(v))
        throw NumericCsvError(where + ", " + col + ": '" + std::string(cell) + "' is not finite");
      t.values.push_back(v);
    }
  }
  if (header) throw NumericCsvError(source + ": empty file (expected a header row of column names)");
  if (t.values.empty()) throw NumericCsvError(source + ": no data rows after the header");
  return t;
}

NumericTable read_numeric_csv(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw NumericCsvError(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_numeric_csv(ss.str(), path);
}

}  // namespace stackscope
