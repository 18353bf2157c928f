// stackscope features REC --layer L: one CSV row per fixed window of the recording with that layer's features
// (analyze/window_layer_features.h), the input of `stackscope detect` in the Table I benchmark.
#include <cstdio>
#include <fstream>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "analyze/window_layer_features.h"
#include "cli/registry.h"
#include "analyze/thresholds.h"
#include "store/numeric_csv.h"
#include "store/recording_reader.h"

namespace stackscope::cli {
namespace {

struct FeaturesCliOptions {
  std::string recording, layer, output, like;
  double window_s = 1.0;
  size_t names = 12;
  std::vector<uint32_t> target_pids;
  bool json = false;
};

const std::vector<std::string> kCallLayers{"cuda", "torch", "python", "nccl", "kernel"};
const std::vector<std::string> kSeriesLayers{"nvml", "host"};

analyze::WindowFeatureTable call_layer_table(const RecordingReader& r, Layer layer, const analyze::WindowGrid& grid,
                                             size_t names) {
  analyze::CallWindowOptions o;
  o.top_names = names;
  if (layer == Layer::cuda) o.always_names = analyze::cuda_sync_and_memory_calls();
  analyze::CallWindowFeatures acc(layer, grid, o);
  r.for_each_event({.layers = {layer}}, [&](const Event& e) { acc.add(e); });
  if (acc.events() == 0)
    throw std::invalid_argument(fmt::format("{} has no {} events", r.path(), layer_name(layer)));
  return acc.table();
}

analyze::WindowFeatureTable series_layer_table(const RecordingReader& r, const std::string& layer,
                                               const analyze::WindowGrid& grid, std::set<uint32_t> targets) {
  analyze::SeriesWindowFeatures acc(grid, std::move(targets));
  r.for_each_sample_run([&](const SeriesInfo& s, std::span<const int64_t> t, std::span<const double> v) {
    if ((layer == "nvml") == (s.source == "nvml")) acc.add(s, t, v);
  });
  auto table = acc.table();
  if (table.columns.empty())
    throw std::invalid_argument(fmt::format("{} has no {} series with samples{}", r.path(), layer,
                                            layer == "host" ? "" : " (was the nvml layer recorded on a GPU host?)"));
  return table;
}

int run_features(const FeaturesCliOptions& opt) {
  if (!(opt.window_s > 0)) throw std::invalid_argument("--window must be > 0 seconds");
  const RecordingReader r(opt.recording);
  const auto span = r.data_span();
  if (!span) throw std::invalid_argument(opt.recording + " holds no events and no samples");
  const auto grid = analyze::make_window_grid(span->first, span->second, static_cast<int64_t>(opt.window_s * 1e9));

  analyze::WindowFeatureTable table;
  if (std::find(kSeriesLayers.begin(), kSeriesLayers.end(), opt.layer) != kSeriesLayers.end()) {
    std::set<uint32_t> targets(opt.target_pids.begin(), opt.target_pids.end());
    if (const std::string pid = r.meta_or("pid"); !pid.empty()) targets.insert(static_cast<uint32_t>(std::stoul(pid)));
    table = series_layer_table(r, opt.layer, grid, std::move(targets));
  } else {
    table = call_layer_table(r, *parse_layer(opt.layer), grid, opt.names);
  }

  if (!opt.like.empty()) {
    // The other table's columns, its medians standing in for what this recording lacks.
    const NumericTable ref = read_numeric_csv(opt.like);
    if (ref.columns.size() < 3 || ref.columns[0] != "t0_ns" || ref.columns[1] != "t1_ns")
      throw std::invalid_argument(opt.like + " is not a table of `stackscope features` (t0_ns,t1_ns first)");
    std::vector<std::string> columns(ref.columns.begin() + 2, ref.columns.end());
    std::map<std::string, double> medians;
    for (size_t c = 2; c < ref.columns.size(); ++c) {
      std::vector<double> v(ref.rows());
      for (size_t r = 0; r < ref.rows(); ++r) v[r] = ref.values[r * ref.columns.size() + c];
      medians[ref.columns[c]] = analyze::threshold_at_quantile(std::span<const double>(v), 0.5);
    }
    table = analyze::conform_columns(table, columns, medians);
  }

  std::ofstream out(opt.output, std::ios::binary);
  if (!out) throw std::runtime_error("cannot write " + opt.output);
  out << "t0_ns,t1_ns";
  for (const auto& c : table.columns) out << ',' << c;
  out << '\n';
  for (size_t w = 0; w < grid.count; ++w) {
    out << grid.start(w) << ',' << grid.end(w);
    for (Eigen::Index c = 0; c < table.values.cols(); ++c)
      out << fmt::format(",{}", table.values(static_cast<Eigen::Index>(w), c));
    out << '\n';
  }
  out.close();
  if (!out) throw std::runtime_error("write failed: " + opt.output);

  if (opt.json) {
    nlohmann::json filled = nlohmann::json::object();
    for (size_t c = 0; c < table.columns.size(); ++c)
      if (table.filled[c]) filled[table.columns[c]] = table.filled[c];
    nlohmann::json j{{"recording", opt.recording}, {"layer", opt.layer},   {"output", opt.output},
                     {"window_s", opt.window_s},   {"windows", grid.count}, {"first_ns", grid.first_ns},
                     {"columns", table.columns},   {"subjects", table.subjects},
                     {"filled_windows", filled}};
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << fmt::format("{}: {} windows of {} s x {} {} features ({} subjects) -> {}\n", opt.recording,
                             grid.count, opt.window_s, table.columns.size(), opt.layer, table.subjects.size(),
                             opt.output);
  }
  return 0;
}

RegisterCommand reg("features", 33, [](CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<FeaturesCliOptions>();
  auto* cmd = app.add_subcommand("features", "Write one layer's features per fixed time window as a numeric CSV");
  cmd->add_option("recording", opt->recording, "Recording file")->required();
  std::vector<std::string> layers = kCallLayers;
  layers.insert(layers.end(), kSeriesLayers.begin(), kSeriesLayers.end());
  cmd->add_option("--layer", opt->layer, "cuda | torch | python | nccl | kernel (events); nvml | host (series)")
      ->required()
      ->check(CLI::IsMember(layers));
  cmd->add_option("-o,--output", opt->output, "CSV to write: t0_ns,t1_ns, then the features")->required();
  cmd->add_option("--window", opt->window_s, "Window length in seconds (default 1.0)")->check(CLI::PositiveNumber);
  cmd->add_option("--names", opt->names,
                  "Event layers: columns for the N most frequent event names (default 12; cuda also always gets "
                  "its sync and memory calls when present)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--like", opt->like,
                  "A features CSV of another recording: write exactly its columns (what this recording lacks: 0 "
                  "for counts, bytes and busy time, else that CSV's median), to train on one and score the other")
      ->check(CLI::ExistingFile);
  cmd->add_option("--target-pid", opt->target_pids,
                  "nvml: the traced process(es), besides the recording's own pid, for the other_procs columns");
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
      "Examples:\n"
      "  stackscope features run.sdb --layer cuda --window 1 -o cuda.csv\n"
      "  stackscope features faulty.sdb --layer cuda --like cuda.csv -o cuda_faulty.csv\n"
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
