// A table of series from elsewhere (CloudWatch exports, Prometheus dumps, NAB files): first column a timestamp
// (seconds since the epoch, possibly fractional, or ISO 8601 such as "2014-02-14 14:30:00" or
// "2014-02-14T14:30:00.5Z" / "+02:00"), one column per series. Read into memory or imported as a recording.
// Every defect is a SeriesCsvError naming the file, the row (1-based line) and the column, quoting at most a short
// excerpt of the cell. A hostile file costs bounded memory and time: a field of more than 64 KiB, a line of more
// than 64 MiB and a header of more than kMaxCsvColumns (store/bounded_csv.h) columns are refused as soon as they are read.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "model/series.h"

namespace stackscope {

class SeriesCsvError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What the flags say about one column; unset fields are inferred from the column's name.
struct SeriesCsvColumnSpec {
  std::optional<Subsystem> subsystem;
  std::optional<SeriesKind> kind;
  std::optional<SeriesCategory> category;
  std::optional<std::string> unit;
};

// Parses "subsystem[:kind[:category[:unit]]]", e.g. "storage:counter:dynamic:bytes"; an empty part is left
// to inference. Throws std::invalid_argument naming the bad part.
SeriesCsvColumnSpec parse_column_spec(std::string_view text);

// Subsystem, kind, category and unit guessed from a column name ("ec2_cpu_utilization" -> cpu gauge,
// "disk_write_bytes_total" -> storage counter, "tcp_retrans_segs_total" -> network event counter).
SeriesInfo infer_series_info(const std::string& column_name);

// What to do with a row whose time is not after the previous row's (backwards, or a duplicate time):
//   sort  (default) keep every row and order them by time (rows of one time keep the file's order); the table
//         is held in memory when the file is out of order.
//   drop  keep only rows later than every row before them (the first row of a repeated time wins).
//   error refuse the file, naming the first such row's line.
enum class CsvDisorder : uint8_t { sort, drop, error };
std::optional<CsvDisorder> parse_csv_disorder(std::string_view text);

struct SeriesCsvOptions {
  std::map<std::string, SeriesCsvColumnSpec> columns;  // by header name
  std::string host = "imported";
  char delimiter = ',';
  CsvDisorder on_disorder = CsvDisorder::sort;
};

// Seconds (since the epoch or any origin) or ISO 8601 (UTC unless an offset is given) -> ns. nullopt if neither.
std::optional<int64_t> parse_csv_timestamp_ns(std::string_view text);

struct SeriesCsvTable {
  std::vector<SeriesInfo> series;             // one per value column, ids unset
  std::vector<int64_t> t_ns;                  // per row, in time order (epoch ns for ISO 8601)
  std::vector<std::vector<double>> values;    // [column][row], NaN for an empty cell
  size_t rows_out_of_order = 0;               // rows earlier than a row above them (sorted into place)
  size_t rows_repeating_a_time = 0;           // rows at the same time as the row above them (kept)
  size_t rows_dropped = 0;                    // on_disorder drop: rows not later than every row above them
};

// Throws SeriesCsvError (unreadable file, no header, no value column, wrong field count, bad number or time,
// a row out of order under on_disorder error, an unknown column named in options).
SeriesCsvTable read_series_csv(const std::string& path, const SeriesCsvOptions& options = {});

struct SeriesCsvImportStats {
  size_t rows = 0, series = 0, samples = 0, empty_cells = 0;
  size_t rows_out_of_order = 0, rows_repeating_a_time = 0, rows_dropped = 0;  // as in SeriesCsvTable
  int64_t first_t_ns = 0, last_t_ns = 0;  // as in the file
};

// Writes the table as a recording at out_path (replaced). Sample times keep their spacing; the recording's
// realtime offset maps them back to the file's times, so recordings imported from several hosts align. The
// whole file is checked before out_path is touched: a defect in it leaves no recording behind.
SeriesCsvImportStats import_series_csv(const std::string& csv_path, const std::string& out_path,
                                       const SeriesCsvOptions& options = {});

}  // namespace stackscope
