#include "store/numeric_csv.h"

#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>

#include "store/bounded_csv.h"

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

// Lines split on commas (no quoted commas: the numeric format has none), each field and line bounded.
NumericTable read_numeric_stream(std::istream& in, const std::string& source) {
  NumericTable t;
  CsvLineReader reader(in, {.delimiter = ',', .quotes = false});
  std::vector<std::string> cells;
  bool header = true;
  for (;;) {
    const auto result = reader.next(cells, header ? kMaxCsvColumns + 1 : t.columns.size());
    if (result == CsvLineReader::Result::end) break;
    const std::string where = source + ":" + std::to_string(reader.line_no());
    if (result != CsvLineReader::Result::line) throw NumericCsvError(where + ": " + reader.problem());
    if (reader.blank()) continue;  // blank lines (a trailing newline) carry nothing
    if (header) {
      if (reader.field_count() > kMaxCsvColumns)
        throw NumericCsvError(where + ": the header has " + std::to_string(reader.field_count()) +
                              " columns, more than the limit of " + std::to_string(kMaxCsvColumns));
      for (size_t c = 0; c < cells.size(); ++c) {
        const std::string_view name = trim(unquote(trim(cells[c])));
        if (name.empty()) throw NumericCsvError(where + ": header column " + std::to_string(c + 1) + " has no name");
        t.columns.emplace_back(name);
      }
      header = false;
      continue;
    }
    if (reader.field_count() != t.columns.size())
      throw NumericCsvError(where + ": " + std::to_string(reader.field_count()) + " cells, the header has " +
                            std::to_string(t.columns.size()));
    for (size_t c = 0; c < cells.size(); ++c) {
      const std::string_view cell = trim(cells[c]);
      double v = 0;
      const char* b = cell.data();
      const char* e = cell.data() + cell.size();
      if (!cell.empty() && *b == '+') ++b;  // from_chars rejects a leading '+'
      const auto r = std::from_chars(b, e, v);
      const bool parsed = !cell.empty() && r.ec == std::errc() && r.ptr == e;
      if (!parsed || !std::isfinite(v)) {
        const std::string col = "column " + quote_excerpt(t.columns[c]);
        if (cell.empty()) throw NumericCsvError(where + ", " + col + ": empty cell");
        throw NumericCsvError(where + ", " + col + ": " + quote_excerpt(cell) +
                              (parsed ? " is not finite" : " is not a number"));
      }
      t.values.push_back(v);
    }
  }
  if (in.bad()) throw NumericCsvError(source + ": read error");
  if (header) throw NumericCsvError(source + ": empty file (expected a header row of column names)");
  if (t.values.empty()) throw NumericCsvError(source + ": no data rows after the header");
  return t;
}
}  // namespace

NumericTable parse_numeric_csv(std::string_view text, const std::string& source) {
  std::istringstream in{std::string(text)};
  return read_numeric_stream(in, source);
}

NumericTable read_numeric_csv(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw NumericCsvError(path + ": cannot open");
  return read_numeric_stream(in, path);
}

}  // namespace stackscope
