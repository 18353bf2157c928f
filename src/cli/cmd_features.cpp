// stackscope features REC --layer L: one CSV row per fixed window of the recording with that layer's features
// (analyze/window_layer_features.h), the input of `stackscope detect` in the Table I benchmark; optionally
// conformed to another table's columns or turned into departures from the job's own recent baseline
// (analyze/window_feature_transforms.h), also for a features CSV written earlier.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/duration_option.h"
#include "analyze/features/window_feature_transforms.h"
#include "analyze/features/window_layer_features.h"
#include "cli/registry.h"
#include "store/numeric_csv.h"
#include "store/output_file.h"
#include "store/recording_reader.h"
#include "store/recording_window_tables.h"

namespace stackscope::cli {
namespace {

struct FeaturesCliOptions {
  std::string recording, layer, output, like;
  double window_s = 1.0;
  double baseline_s = 0;  // 0: no baseline
  std::string baseline_side = "both", baseline_scale = "none";
  size_t names = 12;
  std::vector<uint32_t> target_pids;
  bool json = false;
  std::vector<std::string> recording_only_given;  // options that build a table from a recording, as given
};

const std::vector<std::string> kCallLayers{"cuda", "torch", "python", "nccl", "kernel"};
const std::vector<std::string> kSeriesLayers{"nvml", "host"};

// A features CSV written earlier (its header starts with the window bounds), rather than a recording.
bool is_features_csv(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string head(12, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  return in.gcount() == 12 && head == "t0_ns,t1_ns,";
}

analyze::WindowFeatureTable recording_table(const FeaturesCliOptions& opt) {
  if (opt.layer.empty()) throw std::invalid_argument("--layer is required for a recording");
  if (!(opt.window_s > 0)) throw std::invalid_argument("--window must be > 0 seconds");
  const RecordingReader r(opt.recording);
  WindowTablesOptions o;
  o.window_s = opt.window_s;
  o.top_names = opt.names;
  o.layers = {*parse_layer(opt.layer)};
  o.target_pids.insert(opt.target_pids.begin(), opt.target_pids.end());
  auto tables = read_window_tables(r, o);
  if (auto it = tables.tables.find(opt.layer); it != tables.tables.end()) return std::move(it->second);
  if (std::find(kSeriesLayers.begin(), kSeriesLayers.end(), opt.layer) != kSeriesLayers.end())
    throw std::invalid_argument(fmt::format("{} has no {} series with samples{}", r.path(), opt.layer,
                                            opt.layer == "host" ? "" : " (was the nvml layer recorded on a GPU host?)"));
  throw std::invalid_argument(fmt::format("{} has no {} events", r.path(), opt.layer));
}

int run_features(const FeaturesCliOptions& opt) {
  // Checked before any input is read: never an input, never through a symlink, replaced only once written.
  OutputFile file(opt.output, {.inputs = {opt.recording, opt.like}});
  analyze::WindowFeatureTable table;
  if (is_features_csv(opt.recording)) {
    // Its windows, names and columns are fixed already: say so rather than ignore what was asked.
    if (!opt.recording_only_given.empty())
      throw std::invalid_argument(fmt::format("{} is a features CSV: {} apply only to a recording (a CSV input takes "
                                              "--like and --baseline)",
                                              opt.recording, fmt::join(opt.recording_only_given, ", ")));
    const NumericTable t = read_numeric_csv(opt.recording);
    table = analyze::window_table_from_columns(t.columns, t.values, opt.recording);
  } else {
    table = recording_table(opt);
  }
  const analyze::WindowGrid grid = table.grid;
  const double window_s = static_cast<double>(grid.width_ns) * 1e-9;

  if (!opt.like.empty()) {
    const NumericTable ref = read_numeric_csv(opt.like);
    table = analyze::conform_to_reference(table, ref.columns, ref.values, opt.like);
  }
  analyze::BaselineOptions baseline;
  if (opt.baseline_s > 0) {
    baseline.windows = static_cast<size_t>(std::max(1.0, std::round(opt.baseline_s / window_s)));
    baseline.side = opt.baseline_side == "past" ? analyze::BaselineSide::past : analyze::BaselineSide::both;
    baseline.scale_by_mad = opt.baseline_scale == "mad";
    table = analyze::departure_from_baseline(table, baseline);
  }

  std::ostream& out = file.stream();
  out << "t0_ns,t1_ns";
  for (const auto& c : table.columns) out << ',' << c;
  out << '\n';
  for (size_t w = 0; w < grid.count; ++w) {
    out << grid.start(w) << ',' << grid.end(w);
    for (Eigen::Index c = 0; c < table.values.cols(); ++c)
      out << fmt::format(",{}", table.values(static_cast<Eigen::Index>(w), c));
    out << '\n';
  }
  file.commit();

  if (opt.json) {
    nlohmann::json filled = nlohmann::json::object();
    for (size_t c = 0; c < table.columns.size(); ++c)
      if (table.filled[c]) filled[table.columns[c]] = table.filled[c];
    nlohmann::json j{{"recording", opt.recording}, {"layer", opt.layer},   {"output", opt.output},
                     {"window_s", window_s},       {"windows", grid.count}, {"first_ns", grid.first_ns},
                     {"columns", table.columns},   {"subjects", table.subjects},
                     {"filled_windows", filled}};
    if (opt.baseline_s > 0)
      j["baseline"] = {{"windows", baseline.windows}, {"side", opt.baseline_side}, {"scale", opt.baseline_scale}};
    std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::cout << fmt::format("{}: {} windows of {:g} s x {} {}features ({} subjects){} -> {}\n", opt.recording,
                             grid.count, window_s, table.columns.size(), opt.layer.empty() ? "" : opt.layer + " ",
                             table.subjects.size(),
                             opt.baseline_s > 0 ? fmt::format(", departures from a {}-window baseline ({})",
                                                              baseline.windows, opt.baseline_side)
                                                : "",
                             opt.output);
  }
  return 0;
}

RegisterCommand reg("features", 33, [](CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<FeaturesCliOptions>();
  auto* cmd = app.add_subcommand("features", "Write one layer's features per fixed time window as a numeric CSV");
  cmd->add_option("recording", opt->recording,
                  "Recording file, or a features CSV written earlier (then only --like and --baseline apply)")
      ->required();
  std::vector<std::string> layers = kCallLayers;
  layers.insert(layers.end(), kSeriesLayers.begin(), kSeriesLayers.end());
  cmd->add_option("--layer", opt->layer,
                  "cuda | torch | python | nccl | kernel (events); nvml | host (series); required for a recording")
      ->check(CLI::IsMember(layers));
  cmd->add_option("-o,--output", opt->output, "CSV to write: t0_ns,t1_ns, then the features")->required();
  auto given = [opt](const char* name) {
    return [opt, name](const std::string&) {
      if (std::find(opt->recording_only_given.begin(), opt->recording_only_given.end(), name) ==
          opt->recording_only_given.end())
        opt->recording_only_given.push_back(name);
    };
  };
  cmd->add_option("--window", opt->window_s, "Window length: seconds, or a duration such as 500ms, 5m, 1h (default 1s)")
      ->transform(duration_seconds())
      ->check(CLI::PositiveNumber)
      ->each(given("--window"));
  cmd->add_option("--names", opt->names,
                  "Event layers: columns for the N most frequent event names (default 12; cuda also always gets "
                  "its sync and memory calls when present)")
      ->check(CLI::PositiveNumber)
      ->each(given("--names"));
  cmd->add_option("--like", opt->like,
                  "A features CSV of another recording: write exactly its columns (what this recording lacks: 0 "
                  "for counts, bytes and busy time, else that CSV's median), to train on one and score the other")
      ->check(CLI::ExistingFile);
  cmd->add_option("--baseline", opt->baseline_s,
                  "Write each feature's departure from the job's own recent baseline: the median of the windows in "
                  "the S seconds around it (seconds or a duration such as 30s, 5m; default 0: off)")
      ->transform(duration_seconds())
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--baseline-side", opt->baseline_side,
                  "both (default): the S s before and the S s after, a window departs only from both; past: the S s "
                  "before only (causal)")
      ->check(CLI::IsMember({"both", "past"}));
  cmd->add_option("--baseline-scale", opt->baseline_scale,
                  "none (default): departure in the column's units; mad: divided by the baseline's 1.4826 x MAD, at "
                  "least 1 % of its level and 0.01")
      ->check(CLI::IsMember({"none", "mad"}));
  cmd->add_option("--target-pid", opt->target_pids,
                  "nvml: the traced process(es), besides the recording's own pid, for the other_procs columns")
      ->each(given("--target-pid"));
  cmd->add_flag("--json", opt->json, "Print a JSON summary (columns, subjects, filled windows per column)");
  cmd->footer(
      "Windows: back to back from the recording's first event or sample; a trailing partial window is dropped;\n"
      "every window is a row, also where the layer had no event. Times are CLOCK_MONOTONIC ns as recorded.\n"
      "Event layers, per chosen name: NAME.log10_count = log10(1 + calls), NAME.median_log10_lat_ns and\n"
      "NAME.p95_log10_lat_ns of the window's finished calls, NAME.log10_bytes = log10(1 + sum of bytes) where\n"
      "calls carry bytes, NAME.median_log10_bw_Bps (nccl). A window without a finished call of NAME gets NAME's\n"
      "median latency (bandwidth) over the whole recording. Per layer: LAYER.log10_calls and\n"
      "LAYER.busy_fraction (time inside outermost calls / window; several threads can exceed 1).\n"
      "Series layers, per series: DEVICE.NAME.mean (gauges), .rate_per_s (counters), .max (utilisation); a\n"
      "window without a sample repeats the previous window's value. NVML per-process series become\n"
      "GPU.procs.count, GPU.procs.max_sm_util and GPU.other_procs.{count,sm_util,mem_used} (processes other\n"
      "than the recording's pid and --target-pid).\n"
      "--baseline S: every value becomes value - median of its neighbours (the window itself excluded): with\n"
      "--baseline-side both, of the S s before and of the S s after, keeping only a departure from both sides in\n"
      "the same direction (the smaller one), so a lasting level shift scores 0 and a transient shorter than S/2\n"
      "stands out; with past, of the S s before only. NaN values are left out of baselines and score 0.\n"
      "Examples:\n"
      "  stackscope features run.sdb --layer cuda --window 1 -o cuda.csv\n"
      "  stackscope features faulty.sdb --layer cuda --like cuda.csv -o cuda_faulty.csv\n"
      "  stackscope features cuda.csv --baseline 30 -o cuda_departures.csv\n"
      "  stackscope detect --method gmm --train cuda.csv --input cuda_faulty.csv --output scores.csv \\\n"
      "      --ignore-columns t0_ns,t1_ns --constant-columns floor");
  cmd->callback([opt, &exit_code] {
    try {
      exit_code = run_features(*opt);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "stackscope features: error: %s\n", e.what());
      exit_code = 1;
    }
  });
});

}  // namespace
}  // namespace stackscope::cli
