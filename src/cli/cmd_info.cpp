// stackscope info FILE: what a recording holds (span, series by subsystem, events by layer, drops, notes).
#include <iostream>
#include <algorithm>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "cli/registry.h"
#include "store/recording_reader.h"

namespace stackscope::cli {
namespace {

std::string human_bytes(uint64_t b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  return u ? fmt::format("{:.1f} {}", v, units[u]) : fmt::format("{:.0f} {}", v, units[u]);
}

int run_info(const std::string& path, bool json) {
  RecordingReader r(path);
  RecordingSummary s = r.summary();
  int64_t end = s.closed_cleanly ? s.end_ns : std::max(s.last_data_ns, s.start_ns);
  double span = (end - s.start_ns) / 1e9;
  auto notes = r.notes();
  if (json) {
    nlohmann::json j;
    j["file"] = path;
    j["meta"] = r.meta();
    j["start_ns"] = s.start_ns;
    j["end_ns"] = end;
    j["duration_s"] = span;
    j["closed_cleanly"] = s.closed_cleanly;
    j["realtime_offset_ns"] = s.realtime_offset_ns;
    j["events_by_layer"] = s.events_by_layer;
    j["series_by_subsystem"] = s.series_by_subsystem;
    j["series"] = r.series().size();
    j["samples"] = s.samples;
    j["drops"] = s.drops;
    j["findings"] = s.findings;
    j["file_bytes"] = s.file_bytes;
    if (!r.open_note().empty()) j["open_note"] = r.open_note();
    nlohmann::json jn = nlohmann::json::array();
    for (auto& n : notes) jn.push_back({{"t_ns", n.t_ns}, {"source", n.source}, {"text", n.text}});
    j["notes"] = jn;
    std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return 0;
  }
  uint64_t events = 0, dropped = 0;
  for (auto& [_, n] : s.events_by_layer) events += n;
  for (auto& [_, n] : s.drops) dropped += n;
  std::cout << fmt::format("{}  ({})\n", path, human_bytes(s.file_bytes));
  std::cout << fmt::format("  host      {}  kernel {}\n", r.meta_or("host", "?"), r.meta_or("kernel", "?"));
  std::cout << fmt::format("  cpu       {} x {}\n", r.meta_or("cpu_count", "?"), r.meta_or("cpu_model", "?"));
  if (!r.meta_or("gpu_models").empty()) std::cout << fmt::format("  gpus      {}\n", r.meta_or("gpu_models"));
  if (!r.meta_or("command").empty()) std::cout << fmt::format("  command   {}\n", r.meta_or("command"));
  std::cout << fmt::format("  span      {:.2f} s{}\n", span,
                           s.closed_cleanly ? "" : "  (recorder did not close: data up to the last flushed batch)");
  std::cout << fmt::format("  events    {}\n", events);
  for (auto& [layer, n] : s.events_by_layer) std::cout << fmt::format("    {:<8} {}\n", layer, n);
  std::cout << fmt::format("  series    {}  ({} samples)\n", r.series().size(), s.samples);
  for (auto& [sub, n] : s.series_by_subsystem) std::cout << fmt::format("    {:<8} {}\n", sub, n);
  std::cout << fmt::format("  dropped   {}\n", dropped);
  if (auto cost = nlohmann::json::parse(r.meta_or("recorder_cpu", "null"), nullptr, false);
      cost.is_object() && cost.value("wall_s", 0.0) > 0) {  // recordings older than this key have none
    std::vector<std::pair<double, std::string>> threads;  // the costliest first
    if (cost.contains("threads"))
      for (auto& [name, s] : cost["threads"].items())
        if (s.is_number() && s.get<double>() >= 0.01) threads.emplace_back(s.get<double>(), name);
    std::sort(threads.rbegin(), threads.rend());
    std::string parts;
    for (const auto& [s, name] : threads) parts += fmt::format(" {} {:.2f}", name, s);
    std::cout << fmt::format("  recorder  {:.2f} s CPU over {:.1f} s ({:.1f} % of a core);{}\n", cost.value("cpu_s", 0.0),
                             cost.value("wall_s", 0.0), 100 * cost.value("cpu_s", 0.0) / cost.value("wall_s", 1.0),
                             parts.empty() ? "" : " threads" + parts);
  }
  if (!r.meta_or("write_error").empty()) std::cout << fmt::format("  write error  {}\n", r.meta_or("write_error"));
  for (auto& [src, n] : s.drops) std::cout << fmt::format("    {:<20} {}\n", src, n);
  if (s.findings) std::cout << fmt::format("  findings  {}  (stackscope analyze {} to read them)\n", s.findings, path);
  for (auto& n : notes) std::cout << fmt::format("  note      {}: {}\n", n.source, n.text);
  if (!r.open_note().empty()) std::cout << fmt::format("  opened    {}\n", r.open_note());
  return 0;
}

RegisterCommand reg("info", 20, [](CLI::App& app, int& exit_code) {
  auto path = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand("info", "Summarise a recording: span, series, events by layer, drops");
  cmd->add_option("recording", *path, "Recording file")->required();
  cmd->add_flag("--json", *json, "Print JSON");
  cmd->callback([path, json, &exit_code] { exit_code = run_info(*path, *json); });
});

}  // namespace
}  // namespace stackscope::cli
