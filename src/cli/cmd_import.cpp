// stackscope import --format csv SERIES.csv --out REC: telemetry from elsewhere (a table of series) becomes a
// recording, so `analyze` can run on it.
#include <iostream>
#include <map>

#include <fmt/format.h>

#include "cli/registry.h"
#include "store/output_file.h"
#include "store/series_csv.h"

namespace stackscope::cli {
namespace {

struct ImportOptions {
  std::string format = "csv";
  std::string input;
  std::string out;
  std::string host = "imported";
  std::vector<std::string> columns;  // NAME=subsystem[:kind[:category[:unit]]]
  std::string delimiter = ",";
  std::string on_disorder = "sort";
  bool quiet = false;
};

int run_import(const ImportOptions& opt) {
  SeriesCsvOptions csv;
  csv.host = opt.host;
  if (opt.delimiter == "tab" || opt.delimiter == "\\t") csv.delimiter = '\t';
  else if (opt.delimiter.size() == 1) csv.delimiter = opt.delimiter[0];
  else {
    std::cerr << "stackscope import: --delimiter must be one character or 'tab'\n";
    return 2;
  }
  // Rows whose time is not after the previous row's (CloudWatch exports, a repeated hour at a clock change).
  csv.on_disorder = *parse_csv_disorder(opt.on_disorder);  // CLI checked the value
  try {
    for (const std::string& c : opt.columns) {
      auto eq = c.rfind('=');
      if (eq == std::string::npos || eq == 0)
        throw std::invalid_argument("--column '" + c + "': expected NAME=subsystem[:kind[:category[:unit]]]");
      csv.columns[c.substr(0, eq)] = parse_column_spec(c.substr(eq + 1));
    }
    // Written beside --out and renamed over it at the end: a failed import leaves an existing file untouched;
    // never the input itself, never through a symlink (store/output_file.h).
    OutputFile out(opt.out, {.inputs = {opt.input}, .mode = 0600, .sqlite = true, .what = "--out"});
    auto stats = import_series_csv(opt.input, out.write_path(), csv);
    out.commit();
    if (!opt.quiet) {
      std::string order;
      if (stats.rows_out_of_order)
        order += fmt::format(", {} rows out of time order sorted into place", stats.rows_out_of_order);
      if (stats.rows_repeating_a_time)
        order += fmt::format(", {} rows repeating the time before them kept", stats.rows_repeating_a_time);
      if (stats.rows_dropped)
        order += fmt::format(", {} rows not later than the rows before them dropped", stats.rows_dropped);
      std::cerr << fmt::format("imported {} rows x {} series ({} samples, {} empty cells{}) into {}\n", stats.rows,
                               stats.series, stats.samples, stats.empty_cells, order, opt.out);
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "stackscope import: " << e.what() << "\n";
    return 1;
  }
}

RegisterCommand reg("import", 25, [](CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<ImportOptions>();
  auto* cmd = app.add_subcommand("import", "Turn telemetry from elsewhere (a CSV table of series) into a recording");
  cmd->add_option("--format", opt->format, "Input format (csv)")->check(CLI::IsMember({"csv"}));
  cmd->add_option("input", opt->input,
                  "Table: first column a time (seconds or ISO 8601), one column per series (at most 1,000,000 "
                  "columns, 64 KiB a field)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("-o,--out", opt->out, "Recording to write (replaced once the import succeeded; never the input)")->required();
  cmd->add_option("--host", opt->host, "Host the series belong to (for cross-host analysis)");
  cmd->add_option("--column", opt->columns,
                  "NAME=subsystem[:kind[:category[:unit]]] for a column, e.g. "
                  "disk_write_bytes_total=storage:counter:dynamic:bytes (default: inferred from the name)");
  cmd->add_option("--delimiter", opt->delimiter, "Field separator (default ','; 'tab' for TSV)");
  cmd->add_option("--on-disorder", opt->on_disorder,
                  "Rows whose time is not after the previous row's: sort (default: keep all, ordered by time), drop "
                  "(keep rows later than all before them), error (refuse the file, naming the line)")
      ->check(CLI::IsMember({"sort", "drop", "error"}));
  cmd->add_flag("-q,--quiet", opt->quiet, "No summary line");
  cmd->callback([opt, &exit_code] { exit_code = run_import(*opt); });
});

}  // namespace
}  // namespace stackscope::cli
