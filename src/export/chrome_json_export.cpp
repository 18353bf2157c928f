#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <tuple>

#include "export/exporters.h"

namespace stackscope {

namespace {
using nlohmann::json;

// Lanes other than a thread's own are drawn as extra threads of the process.
constexpr int64_t kLaneTidStride = 1'000'000'000;

double to_us(int64_t ns) { return static_cast<double>(ns) / 1000.0; }

json args_json(const Event& e) {
  json a = json::object();
  for (auto& arg : e.args) std::visit([&](auto& v) { a[arg.key] = v; }, arg.value);
  return a;
}

std::string hex_id(uint64_t id) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(id));
  return buf;
}
}  // namespace

ExportCounts export_chrome_json(const std::vector<const RecordingReader*>& recordings, const ExportOptions& options,
                                std::ostream& out) {
  Timeline tl = build_timeline(recordings, options);
  ExportCounts counts;
  bool first = true;
  auto emit = [&](const json& j) {
    out << (first ? "\n" : ",\n") << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    first = false;
  };
  out << R"({"displayTimeUnit":"ns","otherData":{"producer":"stackscope","clock":"CLOCK_MONOTONIC of the first recording"},"traceEvents":[)";

  // flow id -> (ts, pid, tid) of each event carrying it
  std::map<uint64_t, std::vector<std::tuple<int64_t, int64_t, int64_t>>> flows;
  for (auto& rec : tl.recordings) {
    for (auto& [pid, proc] : rec.processes)
      emit({{"ph", "M"}, {"name", "process_name"}, {"pid", proc.out_pid}, {"tid", 0}, {"args", {{"name", proc.name}}}});
    for (auto& th : rec.threads) {
      int64_t tid = th.out_tid + th.lane * kLaneTidStride;
      std::string tname = "tid " + std::to_string(th.tid);
      if (th.lane) tname += " overlap " + std::to_string(th.lane);
      emit({{"ph", "M"}, {"name", "thread_name"}, {"pid", th.out_pid}, {"tid", tid}, {"args", {{"name", tname}}}});
      for (size_t n = 0; n < th.events.size(); ++n) {
        auto& e = th.events[n];
        std::string cats;
        for (auto& c : event_categories(e)) cats += (cats.empty() ? "" : ",") + c;
        json j = {{"name", event_display_name(e)}, {"cat", cats}, {"pid", th.out_pid}, {"tid", tid},
                  {"ts", to_us(e.start_ns)}, {"args", args_json(e)}};
        if (e.flags & kEventInstant) {
          j["ph"] = "i";
          j["s"] = "t";
          ++counts.instants;
        } else {
          j["ph"] = "X";
          j["dur"] = to_us(std::max<int64_t>(e.duration_ns, 0));
          ++counts.slices;
        }
        emit(j);
        if (uint64_t id = th.flow_ids[n]; id && tl.flow_counts[id] >= 2)
          flows[id].emplace_back(e.start_ns, th.out_pid, tid);
      }
    }
    bool telemetry_named = false;
    for (auto& s : rec.series) {
      int64_t pid = s.out_pid ? s.out_pid : rec.telemetry_pid;
      if (!s.out_pid && !telemetry_named) {
        emit({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"tid", 0},
              {"args", {{"name", "telemetry [" + rec.label + "]"}}}});
        telemetry_named = true;
      }
      std::string name = s.info.key() + (s.info.unit.empty() ? "" : " [" + s.info.unit + "]");
      ++counts.counter_tracks;
      for (size_t j = 0; j < s.t_ns.size(); ++j) {
        emit({{"ph", "C"}, {"name", name}, {"cat", std::string(subsystem_name(s.info.subsystem))}, {"pid", pid},
              {"tid", 0}, {"ts", to_us(s.t_ns[j])}, {"args", {{"value", s.values[j]}}}});
        ++counts.counter_points;
      }
    }
  }
  // One flow per collective: starts at the earliest rank's call, steps through the others, ends at the last.
  for (auto& [id, points] : flows) {
    std::sort(points.begin(), points.end());
    for (size_t k = 0; k < points.size(); ++k) {
      auto [ts, pid, tid] = points[k];
      const char* ph = k == 0 ? "s" : (k + 1 == points.size() ? "f" : "t");
      json j = {{"ph", ph}, {"name", "collective"}, {"cat", "nccl.collective"}, {"id", hex_id(id)},
                {"pid", pid}, {"tid", tid}, {"ts", to_us(ts)}};
      if (*ph == 'f') j["bp"] = "e";
      emit(j);
    }
    ++counts.flows;
  }
  out << "\n]}\n";
  return counts;
}

}  // namespace stackscope
