#include "store/series_csv.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <unordered_map>

#include "model/clock.h"
#include "store/bounded_csv.h"
#include "store/recording_writer.h"
#include "store/sqlite_db.h"

namespace stackscope {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Splits one line; double-quoted fields may hold the delimiter and "" for a quote.
bool split_csv_line(std::string_view line, char delim, std::vector<std::string>& out) {
  out.clear();
  std::string field;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') field += '"', ++i;
      else if (c == '"') quoted = false;
      else field += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == delim) {
      out.push_back(std::move(field));
      field.clear();
    } else {
      field += c;
    }
  }
  out.push_back(std::move(field));
  return !quoted;
}

bool parse_double(std::string_view s, double& out) {
  s = trim(s);
  if (s.empty()) return false;
  if (s.front() == '+') s.remove_prefix(1);
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

bool parse_int(std::string_view s, int& out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

}  // namespace

std::optional<int64_t> parse_csv_timestamp_ns(std::string_view text) {
  text = trim(text);
  if (text.empty()) return std::nullopt;
  double secs;
  if (parse_double(text, secs)) {
    if (!std::isfinite(secs) || std::abs(secs) > 9.2e9) return std::nullopt;
    return static_cast<int64_t>(std::llround(secs * 1e9));
  }
  // YYYY-MM-DD[(T| )HH:MM[:SS[.frac]]][Z|(+|-)HH[:]MM]
  if (text.size() < 10 || text[4] != '-' || text[7] != '-') return std::nullopt;
  int y, mo, d, h = 0, mi = 0, s = 0;
  if (!parse_int(text.substr(0, 4), y) || !parse_int(text.substr(5, 2), mo) || !parse_int(text.substr(8, 2), d))
    return std::nullopt;
  if (mo < 1 || mo > 12 || d < 1 || d > 31) return std::nullopt;
  std::string_view rest = text.substr(10);
  int64_t frac_ns = 0;
  int64_t offset_s = 0;
  if (!rest.empty()) {
    if (rest[0] != 'T' && rest[0] != ' ') return std::nullopt;
    rest.remove_prefix(1);
    if (rest.size() < 5 || rest[2] != ':' || !parse_int(rest.substr(0, 2), h) || !parse_int(rest.substr(3, 2), mi))
      return std::nullopt;
    rest.remove_prefix(5);
    if (!rest.empty() && rest[0] == ':') {
      if (rest.size() < 3 || !parse_int(rest.substr(1, 2), s)) return std::nullopt;
      rest.remove_prefix(3);
      if (!rest.empty() && (rest[0] == '.' || rest[0] == ',')) {
        rest.remove_prefix(1);
        size_t n = 0;
        int64_t scale = 100'000'000;
        while (n < rest.size() && std::isdigit(static_cast<unsigned char>(rest[n]))) {
          frac_ns += (rest[n] - '0') * scale;
          scale /= 10;
          ++n;
        }
        if (n == 0) return std::nullopt;
        rest.remove_prefix(n);
      }
    }
    if (!rest.empty()) {
      if (rest == "Z" || rest == "z") {
      } else if (rest[0] == '+' || rest[0] == '-') {
        int oh, om = 0;
        std::string_view tz = rest.substr(1);
        if (tz.size() == 5 && tz[2] == ':') {
          if (!parse_int(tz.substr(0, 2), oh) || !parse_int(tz.substr(3, 2), om)) return std::nullopt;
        } else if (tz.size() == 4) {
          if (!parse_int(tz.substr(0, 2), oh) || !parse_int(tz.substr(2, 2), om)) return std::nullopt;
        } else if (tz.size() == 2) {
          if (!parse_int(tz, oh)) return std::nullopt;
        } else {
          return std::nullopt;
        }
        offset_s = (rest[0] == '+' ? 1 : -1) * (oh * 3600 + om * 60);
      } else {
        return std::nullopt;
      }
    }
  }
  if (h > 23 || mi > 59 || s > 60) return std::nullopt;
  const int64_t days = days_from_civil(y, static_cast<unsigned>(mo), static_cast<unsigned>(d));
  const int64_t secs_total = days * 86400 + h * 3600 + mi * 60 + s - offset_s;
  // Nanoseconds since the epoch fit in 64 bits from 1677 to 2262 (the fuzzer found year -999 overflowing).
  if (std::abs(secs_total) > 9'200'000'000) return std::nullopt;
  return secs_total * 1'000'000'000 + frac_ns;
}

std::optional<CsvDisorder> parse_csv_disorder(std::string_view text) {
  if (text == "sort") return CsvDisorder::sort;
  if (text == "drop") return CsvDisorder::drop;
  if (text == "error") return CsvDisorder::error;
  return std::nullopt;
}

SeriesCsvColumnSpec parse_column_spec(std::string_view text) {
  SeriesCsvColumnSpec spec;
  std::vector<std::string> parts;
  split_csv_line(text, ':', parts);
  if (parts.size() > 4) throw std::invalid_argument("column spec '" + std::string(text) + "': too many parts");
  if (parts.size() > 0 && !parts[0].empty()) {
    spec.subsystem = parse_subsystem(parts[0]);
    if (!spec.subsystem)
      throw std::invalid_argument("column spec '" + std::string(text) + "': unknown subsystem '" + parts[0] +
                                  "' (cpu, gpu, memory, network, storage, software)");
  }
  if (parts.size() > 1 && !parts[1].empty()) {
    spec.kind = parse_series_kind(parts[1]);
    if (!spec.kind)
      throw std::invalid_argument("column spec '" + std::string(text) + "': unknown kind '" + parts[1] +
                                  "' (gauge, counter, static)");
  }
  if (parts.size() > 2 && !parts[2].empty()) {
    spec.category = parse_series_category(parts[2]);
    if (!spec.category)
      throw std::invalid_argument("column spec '" + std::string(text) + "': unknown category '" + parts[2] +
                                  "' (dynamic, event_counter, static)");
  }
  if (parts.size() > 3 && !parts[3].empty()) spec.unit = parts[3];
  return spec;
}

SeriesInfo infer_series_info(const std::string& column_name) {
  SeriesInfo info;
  info.name = column_name;
  info.source = "import";
  const std::string n = lower(column_name);
  auto has = [&](std::initializer_list<std::string_view> parts) {
    return std::any_of(parts.begin(), parts.end(), [&](std::string_view p) { return n.find(p) != std::string::npos; });
  };
  if (has({"gpu", "nvml", "sm_", "dcgm", "cuda"})) info.subsystem = Subsystem::gpu;
  else if (has({"disk", "sector", "blk", "block", "iops", "nvme", "storage", "fs_", "io_"})) info.subsystem = Subsystem::storage;
  else if (has({"net", "rx", "tx", "tcp", "udp", "packet", "request", "elb", "retrans", "latency", "conn"}))
    info.subsystem = Subsystem::network;
  else if (has({"mem", "swap", "page", "dirty", "writeback", "huge", "rss", "heap", "slab"})) info.subsystem = Subsystem::memory;
  else if (has({"cpu", "load", "irq", "interrupt", "context_switch", "proc", "busy", "mhz", "freq"}))
    info.subsystem = Subsystem::cpu;
  else info.subsystem = Subsystem::software;
  // Prometheus convention: cumulative counters end in _total.
  info.kind = n.size() > 6 && n.ends_with("_total") ? SeriesKind::counter : SeriesKind::gauge;
  info.category = has({"err", "drop", "retrans", "fault", "ecc", "fail", "timeout", "reset"}) ? SeriesCategory::event_counter
                                                                                                : SeriesCategory::dynamic;
  if (has({"bytes"})) info.unit = "bytes";
  else if (has({"percent", "utilization", "util"})) info.unit = n.find("percent") != std::string::npos ? "percent" : "ratio";
  else if (has({"seconds"})) info.unit = "seconds";
  else if (info.category == SeriesCategory::event_counter || has({"count"})) info.unit = "count";
  return info;
}

namespace {

// Reads the file row by row and calls row_fn(line_number, t_ns, values) for each data row.
struct RowOrder {
  size_t out_of_order = 0, repeating = 0, dropped = 0;
};

// An empty cell's spellings (any case): read as a missing value.
bool missing_value_word(std::string_view f) {
  for (std::string_view w : {"nan", "null", "na"})
    if (f.size() == w.size() && std::equal(f.begin(), f.end(), w.begin(), [](char a, char b) {
          return std::tolower(static_cast<unsigned char>(a)) == b;
        }))
      return true;
  return false;
}

template <typename HeaderFn, typename RowFn>
RowOrder scan_series_csv(const std::string& path, const SeriesCsvOptions& opt, HeaderFn header_fn, RowFn row_fn) {
  RowOrder order;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw SeriesCsvError(path + ": cannot open for reading");
  CsvLineReader reader(in, {.delimiter = opt.delimiter, .quotes = true, .skip_bom = true});
  auto where = [&] { return path + ":" + std::to_string(reader.line_no()); };
  // The next line that is not blank; false at the end of the file.
  auto next_line = [&](std::vector<std::string>& out, size_t max_fields, const char* what) {
    for (;;) {
      const auto result = reader.next(out, max_fields);
      if (result == CsvLineReader::Result::end) return false;
      if (result != CsvLineReader::Result::line) throw SeriesCsvError(where() + ": " + reader.problem() + what);
      if (!reader.blank()) return true;
    }
  };
  std::vector<std::string> fields, header;
  if (!next_line(header, kMaxCsvColumns + 1, " in the header"))
    throw SeriesCsvError(path + ": empty file (need a header: timestamp,series...)");
  if (reader.field_count() > kMaxCsvColumns)
    throw SeriesCsvError(where() + ": the header has " + std::to_string(reader.field_count()) +
                         " columns, more than the limit of " + std::to_string(kMaxCsvColumns) +
                         ": split the table into files of fewer columns (each keeps the time column)");
  if (header.size() < 2) throw SeriesCsvError(where() + ": header has no value column");
  for (auto& h : header) h = std::string(trim(h));
  // Column names by position, for the duplicate check and --column (a hash set: a million columns stay linear).
  std::unordered_map<std::string_view, size_t> column_of;
  column_of.reserve(header.size());
  for (size_t c = 1; c < header.size(); ++c) {
    if (header[c].empty())
      throw SeriesCsvError(where() + ": column " + std::to_string(c + 1) + " has no name");
    const auto [it, fresh] = column_of.emplace(header[c], c);
    if (!fresh)
      throw SeriesCsvError(where() + ": column name " + quote_excerpt(header[c]) + " appears twice (columns " +
                           std::to_string(it->second + 1) + " and " + std::to_string(c + 1) + ")");
  }
  for (const auto& [name, spec] : opt.columns)
    if (!column_of.contains(name))
      throw SeriesCsvError(path + ": --column names " + quote_excerpt(name) + ", which is not a column of the header");
  header_fn(header);
  std::vector<double> values(header.size() - 1);
  int64_t prev_t = std::numeric_limits<int64_t>::min();  // the latest time so far
  std::string prev_text;
  size_t prev_line = 0;
  while (next_line(fields, header.size(), "")) {
    const std::string where_row = where();
    if (reader.field_count() != header.size())
      throw SeriesCsvError(where_row + ": expected " + std::to_string(header.size()) + " fields, got " +
                           std::to_string(reader.field_count()));
    auto t = parse_csv_timestamp_ns(fields[0]);
    if (!t)
      throw SeriesCsvError(where_row + ": column " + quote_excerpt(header[0]) + ": " + quote_excerpt(fields[0]) +
                           " is neither seconds nor an ISO 8601 time");
    // Rows out of time order: refused, dropped, or counted and passed on for the caller to sort.
    if (*t <= prev_t) {
      const bool back = *t < prev_t;
      if (opt.on_disorder == CsvDisorder::error)
        throw SeriesCsvError(where_row + ": time " + (back ? "goes backwards" : "repeats") + " (" +
                             quote_excerpt(fields[0]) + " after " + quote_excerpt(prev_text) + " on line " +
                             std::to_string(prev_line) + "); --on-disorder sort or drop accepts such rows");
      if (opt.on_disorder == CsvDisorder::drop) {
        ++order.dropped;
        continue;
      }
      ++(back ? order.out_of_order : order.repeating);
    }
    if (*t >= prev_t) {
      prev_t = *t;
      prev_text = fields[0];
      prev_line = reader.line_no();
    }
    for (size_t c = 1; c < fields.size(); ++c) {
      const std::string_view f = trim(fields[c]);
      double v;
      if (f.empty()) {
        values[c - 1] = std::numeric_limits<double>::quiet_NaN();
      } else if (parse_double(f, v) && std::isfinite(v)) {
        values[c - 1] = v;
      } else if (missing_value_word(f)) {
        values[c - 1] = std::numeric_limits<double>::quiet_NaN();
      } else {
        throw SeriesCsvError(where_row + ": column " + quote_excerpt(header[c]) + ": " + quote_excerpt(f) +
                             " is not a number");
      }
    }
    row_fn(*t, values);
  }
  if (in.bad()) throw SeriesCsvError(path + ": read error");
  return order;
}

std::vector<SeriesInfo> column_series(const std::vector<std::string>& header, const SeriesCsvOptions& opt) {
  std::vector<SeriesInfo> out;
  for (size_t c = 1; c < header.size(); ++c) {
    SeriesInfo info = infer_series_info(header[c]);
    info.host = opt.host;
    auto it = opt.columns.find(header[c]);
    if (it != opt.columns.end()) {
      const auto& s = it->second;
      if (s.subsystem) info.subsystem = *s.subsystem;
      if (s.kind) info.kind = *s.kind;
      if (s.category) info.category = *s.category;
      if (s.unit) info.unit = *s.unit;
    }
    if (info.kind == SeriesKind::static_value) info.category = SeriesCategory::static_value;
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace

SeriesCsvTable read_series_csv(const std::string& path, const SeriesCsvOptions& opt) {
  SeriesCsvTable table;
  const RowOrder order = scan_series_csv(
      path, opt,
      [&](const std::vector<std::string>& header) {
        table.series = column_series(header, opt);
        table.values.resize(table.series.size());
      },
      [&](int64_t t, const std::vector<double>& values) {
        table.t_ns.push_back(t);
        for (size_t c = 0; c < values.size(); ++c) table.values[c].push_back(values[c]);
      });
  if (table.t_ns.empty()) throw SeriesCsvError(path + ": no data rows after the header");
  table.rows_out_of_order = order.out_of_order;
  table.rows_repeating_a_time = order.repeating;
  table.rows_dropped = order.dropped;
  if (order.out_of_order > 0) {  // on_disorder sort: rows of one time keep the file's order
    std::vector<size_t> perm(table.t_ns.size());
    for (size_t i = 0; i < perm.size(); ++i) perm[i] = i;
    std::stable_sort(perm.begin(), perm.end(),
                     [&](size_t a, size_t b) { return table.t_ns[a] < table.t_ns[b]; });
    auto permute = [&](auto& v) {
      auto copy = v;
      for (size_t i = 0; i < perm.size(); ++i) v[i] = copy[perm[i]];
    };
    permute(table.t_ns);
    for (auto& col : table.values) permute(col);
  }
  return table;
}

SeriesCsvImportStats import_series_csv(const std::string& csv_path, const std::string& out_path,
                                       const SeriesCsvOptions& opt) {
  SeriesCsvImportStats stats;
  const int64_t origin = monotonic_ns();
  std::vector<SeriesId> ids;
  std::vector<Sample> batch;
  // Every row is checked before out_path is touched, so a defect leaves no recording behind; a file out of time
  // order (on_disorder sort) is then sorted in memory, any other one streamed.
  size_t checked_rows = 0;
  const RowOrder order = scan_series_csv(
      csv_path, opt, [](const std::vector<std::string>&) {},
      [&](int64_t, const std::vector<double>&) { ++checked_rows; });
  if (checked_rows == 0) throw SeriesCsvError(csv_path + ": no data rows after the header");
  stats.rows_out_of_order = order.out_of_order;
  stats.rows_repeating_a_time = order.repeating;
  stats.rows_dropped = order.dropped;
  std::optional<SeriesCsvTable> sorted;
  if (order.out_of_order > 0) sorted = read_series_csv(csv_path, opt);
  auto rows_in_order = [&](auto series_fn, auto row_fn) {
    if (!sorted) {
      scan_series_csv(
          csv_path, opt, [&](const std::vector<std::string>& header) { series_fn(column_series(header, opt)); },
          row_fn);
      return;
    }
    series_fn(sorted->series);
    std::vector<double> values(sorted->values.size());
    for (size_t r = 0; r < sorted->t_ns.size(); ++r) {
      for (size_t c = 0; c < values.size(); ++c) values[c] = sorted->values[c][r];
      row_fn(sorted->t_ns[r], values);
    }
  };
  {
    RecordingWriter writer(out_path);
    writer.set_meta("host", opt.host);
    writer.set_meta("source", "import:csv");
    writer.set_meta("import.file", csv_path);
    rows_in_order(
        [&](const std::vector<SeriesInfo>& series) {
          for (const SeriesInfo& s : series) ids.push_back(writer.add_series(s));
          stats.series = ids.size();
        },
        [&](int64_t t, const std::vector<double>& values) {
          if (stats.rows == 0) stats.first_t_ns = t;
          stats.last_t_ns = t;
          ++stats.rows;
          const int64_t t_rec = origin + (t - stats.first_t_ns);
          for (size_t c = 0; c < values.size(); ++c) {
            if (std::isnan(values[c])) {
              ++stats.empty_cells;
              continue;
            }
            batch.push_back({ids[c], t_rec, values[c]});
          }
          if (batch.size() >= 65'536) {
            writer.append_samples(batch);
            stats.samples += batch.size();
            batch.clear();
            writer.flush();  // keeps the writer's backlog (and memory) bounded on large files
          }
        });
    if (stats.rows == 0) throw SeriesCsvError(csv_path + ": no data rows after the header");
    writer.append_samples(batch);
    stats.samples += batch.size();
    writer.close();
    if (writer.failed()) throw SeriesCsvError(out_path + ": " + writer.error());
  }
  // The span is the file's, not the import's: start/end and the realtime offset follow the imported times.
  sql::Db db(out_path, sql::Db::Mode::read_write);
  auto st = db.prepare("INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)");
  st.bind(1, std::string_view("start_ns")).bind(2, std::to_string(origin)).run();
  st.bind(1, std::string_view("end_ns")).bind(2, std::to_string(origin + (stats.last_t_ns - stats.first_t_ns) + 1)).run();
  st.bind(1, std::string_view("clock.realtime_offset_ns")).bind(2, std::to_string(stats.first_t_ns - origin)).run();
  return stats;
}

}  // namespace stackscope
