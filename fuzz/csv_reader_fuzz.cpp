// libFuzzer over the CSV readers: `detect`'s numeric tables and `import`'s series tables (timestamps, ISO 8601,
// delimiters, out-of-order rows, column specs). Any bytes must give the reader's error or a clean table, never a
// crash, a hang or an unbounded allocation.
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>

#include "fuzz_input_file.h"
#include "store/numeric_csv.h"
#include "store/series_csv.h"

using namespace stackscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The first byte picks the reader's options; the rest is the file.
  const uint8_t mode = data[0];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    const NumericTable t = parse_numeric_csv(text, "fuzz.csv");
    if (t.rows() * t.columns.size() != t.values.size()) __builtin_trap();  // a ragged table is a reader bug
  } catch (const NumericCsvError&) {
  }
  // Cells and headers reach these parsers on their own too.
  (void)parse_csv_timestamp_ns(text.substr(0, 64));
  (void)parse_csv_disorder(text.substr(0, 8));
  try {
    (void)parse_column_spec(text.substr(0, 64));
  } catch (const std::invalid_argument&) {
  }
  FuzzInputFile file(data + 1, size - 1, ".csv");
  if (!file.ok()) return 0;
  SeriesCsvOptions options;
  options.delimiter = (mode & 1) ? ';' : ',';
  options.on_disorder = static_cast<CsvDisorder>((mode >> 1) % 3);
  try {
    const SeriesCsvTable t = read_series_csv(file.path(), options);
    for (const auto& column : t.values)
      if (column.size() != t.t_ns.size()) __builtin_trap();
    for (size_t i = 1; i < t.t_ns.size(); ++i)
      if (t.t_ns[i] < t.t_ns[i - 1]) __builtin_trap();  // "in time order", whatever the disorder mode
  } catch (const SeriesCsvError&) {
  }
  return 0;
}
