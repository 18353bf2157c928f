// stackscope stragglers INPUT... : which worker is the straggler, which of its operations, and why (KAIR).
// INPUT: stackscope recordings, PyTorch profiler (Kineto) traces one per rank (.json/.json.gz), or one
// step-time table (CSV worker,step,time) for stage 1 alone.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "analyze/stragglers/straggler.h"
#include "cli/registry.h"
#include "export/straggler_html.h"
#include "store/kineto_trace_reader.h"
#include "store/output_file.h"
#include "store/recording_timeline_reader.h"
#include "store/step_table_reader.h"

namespace stackscope::cli {
namespace {

struct StragglerCliOptions {
  std::vector<std::string> inputs;
  bool json = false;
  std::string html;
  bool classic_z = false;
  int window_steps = 0;
  size_t top = 10;
};

// How a worker is named to a person: its rank, where it ran, its GPU; the pid only when nothing better is known.
std::string worker_label(const analyze::StragglerReport& r, int w) {
  if (w < 0 || static_cast<size_t>(w) >= r.workers.size()) return "?";
  std::string s = r.workers[w];
  if (static_cast<size_t>(w) < r.identity.size()) {
    const auto& id = r.identity[w];
    std::string extra;
    if (id.local_rank >= 0) extra += "local rank " + std::to_string(id.local_rank);
    if (!id.gpu.empty()) extra += (extra.empty() ? "" : ", ") + id.gpu;
    if (id.pid && s.find(":pid") == std::string::npos) extra += (extra.empty() ? "" : ", ") + ("pid " + std::to_string(id.pid));
    if (!extra.empty()) s += " (" + extra + ")";
  }
  return s;
}

nlohmann::json verdict_json(const analyze::StragglerReport& r) {
  using namespace analyze;
  const auto& v = r.verdict;
  nlohmann::json j = {{"kind", std::string(verdict_kind_name(v.kind))},
                      {"confidence", v.confidence},
                      {"evidence", v.evidence},
                      {"sync_points", v.points},
                      {"step_ms", v.step_ns / 1e6},
                      {"excess_ms", v.excess_ns / 1e6},
                      {"excess_measured", v.excess_measured},
                      {"recorded_ms", v.recorded_ns / 1e6}};
  if (!v.excess_measured) j["excess_ms"] = nullptr;  // not timed, not zero
  j["workers"] = nlohmann::json::array();
  for (int w : v.workers) j["workers"].push_back(r.workers[w]);
  if (v.kind == VerdictKind::one_straggler || v.kind == VerdictKind::slow_group) {
    j["cause"] = std::string(cause_class_name(v.cause));
    j["cause_detail"] = v.cause_detail;
  }
  return j;
}

nlohmann::json report_json(const analyze::StragglerReport& r, const analyze::StragglerOptions& o) {
  using namespace analyze;
  nlohmann::json j;
  j["input"] = r.from_step_table ? "step-table" : "timelines";
  j["steps"] = {{"source", r.from_step_table ? "step-table" : std::string(step_source_name(r.steps.source))},
                {"period", r.steps.period},
                {"count", r.step_labels.size()},  // analysed (steps cut by the ends of the trace left out)
                {"found", r.from_step_table ? static_cast<int>(r.step_labels.size()) : r.steps.steps}};
  j["stage2_method"] = o.stage2.robust ? "robust-median-mad" : "classical-mean-sd";
  j["stragglers"] = nlohmann::json::array();
  for (size_t k = 0; k < r.stragglers.size() && k < 10; ++k) j["stragglers"].push_back(r.workers[r.stragglers[k]]);
  j["verdict"] = verdict_json(r);
  auto& workers = j["workers"] = nlohmann::json::array();
  for (size_t w = 0; w < r.workers.size(); ++w) {
    nlohmann::json x = {{"worker", r.workers[w]},
                        {"group", r.group[w]},
                        {"score", r.stage1.score[w]},
                        {"s_a", r.stage1.whole_run[w]},
                        {"persistent", r.stage1.persistent[w]},
                        {"episodic", r.stage1.episodic[w]},
                        {"clock_offset_ns", r.clock_offsets[w]}};
    if (w < r.identity.size()) {
      const auto& id = r.identity[w];
      if (id.rank >= 0) x["rank"] = id.rank;
      if (id.local_rank >= 0) x["local_rank"] = id.local_rank;
      if (!id.host.empty()) x["host"] = id.host;
      if (!id.gpu.empty()) x["gpu"] = id.gpu;
      if (id.pid) x["pid"] = id.pid;
      if (!id.loop_function.empty()) x["loop_function"] = id.loop_function;
    }
    if (w < r.verdict.per_worker.size() && r.verdict.points > 0) {
      const auto& pw = r.verdict.per_worker[w];
      x["late_ms_per_point"] = pw.late_ns / 1e6;
      x["wait_ms_per_point"] = pw.wait_ns / 1e6;
      x["last_share"] = pw.last_share;
      x["cpu_ms_per_step"] = pw.cpu_ns / 1e6;
      x["offcpu_ms_per_step"] = pw.offcpu_ns / 1e6;
      if (pw.launches > 0) x["launches_per_step"] = pw.launches;
      if (pw.launch_steps > 0) x["launch_steps_watched"] = pw.launch_steps;
      if (pw.sm_util >= 0) x["gpu_sm_util"] = pw.sm_util;
      if (pw.others_sm_util > 0) x["gpu_others_sm_util"] = pw.others_sm_util;
      if (pw.others_listed > 0) x["gpu_others_listed_share"] = pw.others_listed;
      if (pw.throttled > 0) x["gpu_throttled_share"] = pw.throttled;
      if (pw.gpu_mem_used >= 0) x["gpu_mem_used_share"] = pw.gpu_mem_used;
      if (pw.allocs > 0) x["gpu_allocs_per_step"] = pw.allocs;
      if (pw.retransmits_per_s > 0) x["tcp_retransmits_per_s"] = pw.retransmits_per_s;
      if (pw.runq_ns >= 0) x["runq_wait_ms_per_step"] = pw.runq_ns / 1e6;
      if (pw.oncpu_ns >= 0) x["oncpu_ms_per_step"] = pw.oncpu_ns / 1e6;
    }
    if (r.stage1.episode_window[w] >= 0) {
      const auto& win = r.stage1.windows[r.stage1.episode_window[w]];
      x["episode_steps"] = {win.first_step, win.last_step};
    }
    workers.push_back(x);
  }
  auto& wins = j["windows"] = nlohmann::json::array();
  for (auto& win : r.stage1.windows) wins.push_back({{"first_step", win.first_step}, {"last_step", win.last_step}, {"s_a", win.score}});
  auto& flagged = j["flagged_operations"] = nlohmann::json::array();
  for (auto& f : r.flagged)
    flagged.push_back({{"worker", r.workers[f.worker]},
                       {"operation", f.name},
                       {"kind", std::string(op_kind_name(f.kind))},
                       {"step", f.step},
                       {"a", f.a},
                       {"z_start", f.z_start},
                       {"z_duration", f.z_duration},
                       {"duration_ns", f.duration_ns},
                       {"expected_duration_ns", f.expected_duration_ns},
                       {"start_delay_ns", f.start_delay_ns}});
  auto& causes = j["root_causes"] = nlohmann::json::array();
  for (auto& rc : r.root_causes)
    causes.push_back({{"kind", std::string(cause_kind_name(rc.kind))},
                      {"class", cause_is_edge(rc.kind) ? "edge" : "compute"},
                      {"worker", r.workers[rc.worker]},
                      {"operation", rc.operation},
                      {"steps", rc.steps},
                      {"excess_ns", rc.excess_ns},
                      {"score", rc.score},  // the ranking key (delay added, halved for a sporadic cause)
                      {"z", rc.z},
                      {"victims", rc.victims},
                      {"evidence", rc.evidence}});
  return j;
}

std::string report_text(const analyze::StragglerReport& r, size_t top) {
  using namespace analyze;
  std::string s;
  char buf[512];
  std::snprintf(buf, sizeof buf, "Stragglers (KAIR): %zu workers, %zu steps (%s)\n", r.workers.size(), r.from_step_table ? r.step_labels.size() : static_cast<size_t>(std::max(0, r.steps.steps)),
                r.from_step_table ? "step-time table" : std::string(step_source_name(r.steps.source)).c_str());
  s += buf;
  const auto& v = r.verdict;
  if (v.kind != VerdictKind::undetermined) {
    std::snprintf(buf, sizeof buf, "  verdict: %s (confidence %.2f, %d synchronisation points, step %.2f ms)\n",
                  std::string(verdict_kind_name(v.kind)).c_str(), v.confidence, v.points, v.step_ns / 1e6);
    s += buf;
    if (v.kind == VerdictKind::spread) {
      s += "    ranks by lateness (no single culprit):";
      for (size_t k = 0; k < v.workers.size() && k < top; ++k) s += (k ? ", " : " ") + worker_label(r, v.workers[k]);
      s += "\n";
    } else {
      for (int w : v.workers) s += "    " + worker_label(r, w) + "\n";
    }
    s += "    " + v.evidence + "\n";
    if (v.kind == VerdictKind::one_straggler || v.kind == VerdictKind::slow_group)
      s += "    cause: " + std::string(cause_class_name(v.cause)) + " -- " + v.cause_detail + "\n";
    if ((v.kind == VerdictKind::one_straggler || v.kind == VerdictKind::slow_group) && !v.excess_measured)
      s += "    cost: not measured (the others waited for it in GPU kernels, which the host does not time)\n";
  } else if (!r.stragglers.empty()) {
    s += "  no waiting signal (" + v.evidence + "); KAIR's top worker: " + worker_label(r, r.stragglers.front());
    if (!r.root_causes.empty())
      s += " -- " + std::string(cause_kind_name(r.root_causes[0].kind)) + " " + r.root_causes[0].operation + " (" +
           (cause_is_edge(r.root_causes[0].kind) ? "edge" : "compute") + ")";
    s += "\n";
  }
  s += "Stage 1 (execution rhythm, pairwise K-S):\n";
  for (size_t k = 0; k < r.stage1.ranking.size() && k < top; ++k) {
    const int w = r.stage1.ranking[k];
    std::string ep;
    if (r.stage1.episode_window[w] >= 0 && r.stage1.episodic[w] > 0)
      ep = " episode steps " + std::to_string(r.stage1.windows[r.stage1.episode_window[w]].first_step) + "-" +
           std::to_string(r.stage1.windows[r.stage1.episode_window[w]].last_step);
    std::snprintf(buf, sizeof buf, "  %-24s score %.3f  S_A %.3f  persistent %.3f  episodic %.3f%s\n", r.workers[w].c_str(),
                  r.stage1.score[w], r.stage1.whole_run[w], r.stage1.persistent[w], r.stage1.episodic[w], ep.c_str());
    s += buf;
  }
  if (r.from_step_table) return s;
  std::snprintf(buf, sizeof buf, "Stage 2 (%s z-scores, a > 3): %zu flagged operations\n",
                r.stage2.robust ? "robust" : "classical", r.stage2.flagged.size());
  s += buf;
  for (size_t k = 0; k < r.flagged.size() && k < top; ++k) {
    const auto& f = r.flagged[k];
    std::snprintf(buf, sizeof buf, "  %-24s step %-5d %-40.40s a %.1f (start z %.1f, duration z %.1f)\n",
                  r.workers[f.worker].c_str(), f.step, f.name.c_str(), f.a, f.z_start, f.z_duration);
    s += buf;
  }
  s += v.kind == VerdictKind::none || v.kind == VerdictKind::spread
           ? "Stage 3 (backward blame): the largest deviations (the verdict above found no culprit: not causes)\n"
           : "Stage 3 (backward blame): root causes\n";
  for (size_t k = 0; k < r.root_causes.size() && k < top; ++k) {
    const auto& rc = r.root_causes[k];
    std::snprintf(buf, sizeof buf, "  %zu. %-18s %-24s %s\n     %s\n", k + 1, std::string(cause_kind_name(rc.kind)).c_str(),
                  r.workers[rc.worker].c_str(), rc.operation.c_str(), rc.evidence.c_str());
    s += buf;
  }
  return s;
}

int run_stragglers(const StragglerCliOptions& opt) {
  if (!opt.html.empty()) check_output_path(opt.html, opt.inputs, "--html");  // before any input is read
  analyze::StragglerOptions options;
  options.stage2.robust = !opt.classic_z;
  options.stage1.window_steps = opt.window_steps;
  analyze::StragglerReport report;
  std::vector<std::string> tables;
  std::vector<TraceInputFormat> formats;
  for (auto& in : opt.inputs) {
    formats.push_back(sniff_trace_input(in));
    if (formats.back() == TraceInputFormat::parquet)
      throw std::invalid_argument(in + ": a Parquet file, which stragglers does not read; supported: " + std::string(kSupportedTraceInputs));
    if (formats.back() == TraceInputFormat::unknown)
      throw std::invalid_argument(in + ": not an input stragglers reads; supported: " + std::string(kSupportedTraceInputs));
    if (formats.back() == TraceInputFormat::step_table) tables.push_back(in);
  }
  if (!tables.empty()) {
    if (opt.inputs.size() != 1)
      throw std::invalid_argument("a step-time table (" + tables.front() + ") is analysed alone: give one table, or timelines");
    report = analyze::analyze_step_times(read_step_table(tables.front()), options);
  } else {
    TimelineSet set;
    for (size_t i = 0; i < opt.inputs.size(); ++i) {
      if (formats[i] == TraceInputFormat::chrome_json)
        read_kineto_trace(opt.inputs[i], set);
      else
        read_recording_timelines(opt.inputs[i], set);
    }
    if (set.workers.size() < 2)
      throw std::invalid_argument("straggler analysis compares workers: the input" + std::string(opt.inputs.size() > 1 ? "s hold" : " holds") +
                                  " " + std::to_string(set.workers.size()) +
                                  " (give a recording of the whole job, one trace per rank, or one trace with a pid per rank)");
    report = analyze::analyze_stragglers(std::move(set), options);
  }
  if (!opt.html.empty()) {
    OutputFile html(opt.html, {.inputs = opt.inputs, .what = "--html"});
    html.stream() << straggler_html(report, "stackscope stragglers");
    html.commit();
  }
  if (opt.json)
    std::cout << report_json(report, options).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  else
    std::cout << report_text(report, opt.top);
  return 0;
}

RegisterCommand reg("stragglers", 35, [](CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<StragglerCliOptions>();
  auto* cmd = app.add_subcommand("stragglers", "Find the straggler worker, its abnormal operations and their root cause (KAIR)");
  cmd->add_option("inputs", opt->inputs,
                  "Recordings, or Kineto traces (.json/.json.gz, one per rank), or one step-time table (CSV worker,step,time)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_flag("--json", opt->json, "Print one JSON object (per-worker scores, flagged operations, root causes)");
  cmd->add_option("--html", opt->html, "Write a self-contained HTML report (heatmaps, frequency timeline) here");
  cmd->add_flag("--classic-z", opt->classic_z, "Stage 2 with mean/standard deviation instead of median/MAD");
  cmd->add_option("--window-steps", opt->window_steps, "Steps per stage-1 window (default: automatic)");
  cmd->add_option("--top", opt->top, "Rows per section of the text report");
  cmd->callback([opt, &exit_code] { exit_code = run_stragglers(*opt); });
});

}  // namespace
}  // namespace stackscope::cli
