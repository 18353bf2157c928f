// Reads a numeric CSV (header row of column names, then one row per item, every cell a finite number): the
// input of `stackscope detect`. Every defect becomes a NumericCsvError naming the file, line and column.
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace stackscope {

class NumericCsvError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct NumericTable {
  std::vector<std::string> columns;
  std::vector<double> values;  // row-major, rows() * columns.size()
  size_t rows() const { return columns.empty() ? 0 : values.size() / columns.size(); }
};

// `source` names the input in error messages (a path).
NumericTable parse_numeric_csv(std::string_view text, const std::string& source);
NumericTable read_numeric_csv(const std::string& path);

}  // namespace stackscope
