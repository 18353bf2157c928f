#include "export/timeline.h"

#include <fnmatch.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <stdexcept>

namespace stackscope {

namespace {
// Linux pids are below 2^22 (pid_max limit), so recording i can own the pid block (i+1) << 22.
constexpr uint32_t kPidBits = 22;
// Synthetic processes for recording-wide counters sit far above any remapped pid.
constexpr uint32_t kTelemetryPidBase = 0x7F000000u;

bool glob(const std::string& pattern, const std::string& text) {
  return ::fnmatch(pattern.c_str(), text.c_str(), 0) == 0;
}

// FNV-1a over the bytes: flow ids must agree across ranks, so they come from the values, not from addresses.
uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

// "gpu0/pid1234" -> 1234
std::optional<uint32_t> pid_of_device(const std::string& device) {
  auto pos = device.rfind("/pid");
  if (pos == std::string::npos) return std::nullopt;
  try {
    size_t used = 0;
    unsigned long v = std::stoul(device.substr(pos + 4), &used);
    if (used == device.size() - pos - 4) return static_cast<uint32_t>(v);
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

// Process names the recording knows: the samplers' "pid:<pid>:<comm>" and "gpuN/pid<pid>/<comm>" devices, then
// the traced process from meta "pid" and "command" (its command's base name wins).
std::map<uint32_t, std::string> process_names(const RecordingReader& r) {
  std::map<uint32_t, std::string> names;
  for (const SeriesInfo& s : r.series()) {
    const std::string& d = s.device;
    try {
      if (d.rfind("pid:", 0) == 0) {
        const auto colon = d.find(':', 4);
        if (colon == std::string::npos || colon + 1 >= d.size()) continue;
        const auto pid = static_cast<uint32_t>(std::stoul(d.substr(4, colon - 4)));
        if (pid) names.emplace(pid, d.substr(colon + 1));
      } else if (auto at = d.find("/pid"); at != std::string::npos) {
        const auto slash = d.find('/', at + 4);
        if (slash == std::string::npos || slash + 1 >= d.size()) continue;
        names.emplace(static_cast<uint32_t>(std::stoul(d.substr(at + 4, slash - at - 4))), d.substr(slash + 1));
      }
    } catch (const std::exception&) {
      // a device that only looks like a process: no name from it
    }
  }
  const std::string command = r.meta_or("command");
  if (!command.empty()) {
    try {
      const auto pid = static_cast<uint32_t>(std::stoul(r.meta_or("pid", "0")));
      std::string first = command.substr(0, command.find(' '));
      first = std::filesystem::path(first).filename().string();
      if (pid && !first.empty()) names[pid] = first;
    } catch (const std::exception&) {
    }
  }
  return names;
}

std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    const size_t j = s.find(' ', i);
    if (j != i) out.push_back(s.substr(i, j == std::string::npos ? std::string::npos : j - i));
    if (j == std::string::npos) break;
    i = j + 1;
  }
  return out;
}

// A Python thread's own entry point: the outermost frame of its stack samples that is not the interpreter's
// thread start-up ("Thread._bootstrap", "Thread.run") or the main module.
std::string python_entry(const std::vector<Event>& samples) {
  std::map<std::string, size_t> seen;
  for (const Event& e : samples) {
    const ArgValue* v = e.arg("stack");
    const auto* stack = v ? std::get_if<std::string>(v) : nullptr;
    if (!stack) continue;
    size_t i = 0;
    while (i <= stack->size()) {
      size_t j = stack->find(';', i);
      if (j == std::string::npos) j = stack->size();
      const std::string f = stack->substr(i, j - i);
      if (!f.empty() && f != "..." && f != "<module>" && f.rfind("Thread.", 0) != 0 && f.find("_bootstrap") == std::string::npos) {
        ++seen[f];
        break;
      }
      i = j + 1;
    }
  }
  std::string best;
  size_t n = 0;
  for (const auto& [f, c] : seen)
    if (c > n) best = f, n = c;
  return best;
}

bool is_cpu_stack_sample(const Event& e) {
  if (e.layer != Layer::python) return false;
  const ArgValue* s = e.arg("sample");
  const ArgValue* st = e.arg("stack");
  return s && st && std::holds_alternative<std::string>(*s) && std::get<std::string>(*s) == "cpu" &&
         std::holds_alternative<std::string>(*st);
}

struct FlowEvent {
  Event event;
  uint64_t flow = 0;
};

// Splits one thread's events into lanes in which every slice nests inside the previous open one, because
// track-event viewers require proper nesting per track and host probes can overlap by a few ns.
std::vector<std::vector<FlowEvent>> nest_into_lanes(std::vector<FlowEvent> events) {
  std::sort(events.begin(), events.end(), [](const FlowEvent& a, const FlowEvent& b) {
    if (a.event.start_ns != b.event.start_ns) return a.event.start_ns < b.event.start_ns;
    return a.event.duration_ns > b.event.duration_ns;  // the enclosing one first
  });
  std::vector<std::vector<FlowEvent>> lanes(1);
  std::vector<std::vector<int64_t>> open_ends(1);
  for (auto& fe : events) {
    const Event& e = fe.event;
    if (e.flags & kEventInstant) {
      lanes[0].push_back(std::move(fe));
      continue;
    }
    int64_t end = e.start_ns + std::max<int64_t>(e.duration_ns, 0);
    size_t k = 0;
    for (;; ++k) {
      if (k == lanes.size()) {
        lanes.emplace_back();
        open_ends.emplace_back();
      }
      auto& stack = open_ends[k];
      while (!stack.empty() && stack.back() <= e.start_ns) stack.pop_back();
      if (stack.empty() || end <= stack.back()) {
        stack.push_back(end);
        break;
      }
    }
    lanes[k].push_back(std::move(fe));
  }
  return lanes;
}

// Fills in derived collective ids for one process's NCCL events (see derived_collective_flow_id).
void derive_collective_ids(std::vector<FlowEvent*> nccl) {
  std::sort(nccl.begin(), nccl.end(),
            [](const FlowEvent* a, const FlowEvent* b) { return a->event.start_ns < b->event.start_ns; });
  std::map<int64_t, uint64_t> ordinal;  // comm address -> creation order
  std::map<int64_t, uint64_t> calls;    // comm address -> collectives so far
  auto ordinal_of = [&](int64_t comm) {
    return ordinal.try_emplace(comm, ordinal.size()).first->second;
  };
  for (auto* fe : nccl) {
    const Event& e = fe->event;
    if (e.name.rfind("ncclCommInit", 0) == 0 && e.arg("comm")) {
      ordinal_of(e.arg_int("comm"));
    } else if (e.name == "ncclCommSplit" && e.arg("new_comm")) {
      ordinal_of(e.arg_int("new_comm"));
    } else if (fe->flow == 0 && is_nccl_collective(e.name) && e.arg("comm")) {
      int64_t comm = e.arg_int("comm");
      fe->flow = derived_collective_flow_id(ordinal_of(comm), calls[comm]++);
    }
  }
}
}  // namespace

bool series_matches(const SeriesInfo& s, const std::string& pattern) {
  if (pattern.empty()) return true;
  return glob(pattern, s.key()) || glob(pattern, s.name);
}

std::string event_display_name(const Event& e) {
  return (e.flags & kEventHostEnqueue) ? e.name + " (enqueue)" : e.name;
}

std::vector<std::string> event_categories(const Event& e) {
  std::vector<std::string> c{std::string(layer_name(e.layer))};
  if (e.flags & kEventHostEnqueue) c.push_back("enqueue");
  if (e.flags & kEventInstant) c.push_back("instant");
  if (e.flags & kEventUnfinished) c.push_back("unfinished");
  return c;
}

std::string event_flags_text(uint8_t flags) {
  std::string out;
  auto add = [&](const char* s) {
    if (!out.empty()) out += '|';
    out += s;
  };
  if (flags & kEventHostEnqueue) add("enqueue");
  if (flags & kEventInstant) add("instant");
  if (flags & kEventUnfinished) add("unfinished");
  return out;
}

bool is_nccl_collective(const std::string& name) {
  for (const char* n : {"ncclAllReduce", "ncclAllGather", "ncclReduceScatter", "ncclBroadcast", "ncclBcast",
                        "ncclReduce", "ncclAllToAll"})
    if (name == n) return true;
  return false;
}

uint64_t derived_collective_flow_id(uint64_t comm_ordinal, uint64_t seq) {
  uint64_t h = fnv1a(14695981039346656037ull, "derived", 7);
  h = fnv1a(h, &comm_ordinal, sizeof comm_ordinal);
  h = fnv1a(h, &seq, sizeof seq);
  return h ? h : 1;
}

std::optional<uint64_t> collective_flow_id(const Event& e) {
  if (e.layer != Layer::nccl) return std::nullopt;
  const ArgValue* comm = nullptr;
  for (const char* key : {"comm_hash", "comm_id"})
    if ((comm = e.arg(key))) break;
  const ArgValue* seq = e.arg("seq");
  if (!comm || !seq || !std::holds_alternative<int64_t>(*seq)) return std::nullopt;
  uint64_t h = 14695981039346656037ull;
  if (auto* s = std::get_if<std::string>(comm)) {
    h = fnv1a(h, s->data(), s->size());
  } else if (auto* i = std::get_if<int64_t>(comm)) {
    h = fnv1a(h, i, sizeof *i);
  } else {
    return std::nullopt;
  }
  int64_t sq = std::get<int64_t>(*seq);
  h = fnv1a(h, &sq, sizeof sq);
  return h ? h : 1;  // 0 means "no flow" to some viewers
}

analyze::DerivedSeries derived_series_of(const RecordingReader& r, const std::string& pattern) {
  analyze::DerivedSeries d = analyze::derive_series(r.series(), r.load_samples());
  analyze::DerivedSeries out;
  for (auto& s : d.series) {
    if (!series_matches(s, pattern)) continue;
    out.series.push_back(s);
    if (auto it = d.samples.find(s.id); it != d.samples.end()) out.samples.emplace(s.id, std::move(it->second));
  }
  return out;
}

Timeline build_timeline(const std::vector<const RecordingReader*>& recordings, const ExportOptions& options) {
  if (recordings.empty()) throw std::invalid_argument("no recording to export");
  if (recordings.size() >= (kTelemetryPidBase >> kPidBits))
    throw std::invalid_argument("too many recordings to merge into one timeline");
  Timeline tl;
  auto offset_of = [](const RecordingReader& r) -> int64_t {
    try {
      return std::stoll(r.meta_or("clock.realtime_offset_ns", "0"));
    } catch (const std::exception&) {
      throw std::invalid_argument(r.path() + ": meta clock.realtime_offset_ns is not an integer");
    }
  };
  int64_t offset0 = offset_of(*recordings[0]);

  // First pass: events per (pid, tid) per recording, and which pids occur in more than one recording.
  std::vector<std::map<std::pair<uint32_t, uint32_t>, std::vector<FlowEvent>>> per_thread(recordings.size());
  std::map<uint32_t, std::set<size_t>> pid_owners;
  EventFilter filter;
  filter.layers = options.layers;
  for (size_t i = 0; i < recordings.size(); ++i) {
    auto& r = *recordings[i];
    TimelineRecording rec;
    rec.shift_ns = offset_of(r) - offset0;
    std::string base = std::filesystem::path(r.path()).filename().string();
    std::string host = r.meta_or("host");
    rec.label = r.meta_or("rank").empty() ? base : "rank " + r.meta_or("rank") + " " + base;
    if (!host.empty()) rec.label += " (host " + host + ")";
    rec.telemetry_pid = kTelemetryPidBase + static_cast<uint32_t>(i);
    rec.realtime_offset_ns = offset_of(r);
    if (i < options.incidents.size()) {
      rec.incidents = options.incidents[i];
      for (Incident& inc : rec.incidents) {
        inc.start_ns += rec.shift_ns;
        inc.end_ns += rec.shift_ns;
      }
    }
    if (options.events) {
      r.for_each_event(filter, [&](const Event& e) {
        FlowEvent c{e, collective_flow_id(e).value_or(0)};
        c.event.start_ns += rec.shift_ns;
        per_thread[i][{e.pid, e.tid}].push_back(std::move(c));
        pid_owners[e.pid].insert(i);
        ++tl.events;
      });
    }
    tl.recordings.push_back(std::move(rec));
  }
  bool remap = false;
  for (auto& [pid, owners] : pid_owners) remap |= owners.size() > 1;

  for (size_t i = 0; i < recordings.size(); ++i) {
    auto& rec = tl.recordings[i];
    auto out_pid = [&](uint32_t pid) {
      return remap ? ((static_cast<uint32_t>(i) + 1) << kPidBits) | (pid & ((1u << kPidBits) - 1)) : pid;
    };
    std::map<uint32_t, std::vector<FlowEvent*>> nccl_by_pid;
    for (auto& [key, events] : per_thread[i])
      for (auto& fe : events)
        if (fe.event.layer == Layer::nccl) nccl_by_pid[key.first].push_back(&fe);
    for (auto& [pid, list] : nccl_by_pid) derive_collective_ids(std::move(list));
    const std::map<uint32_t, std::string> names = process_names(*recordings[i]);
    const std::string traced_pid = recordings[i]->meta_or("pid");
    for (auto& [key, events] : per_thread[i]) {
      auto [pid, tid] = key;
      if (!rec.processes.count(pid)) {
        auto known = names.find(pid);
        std::string name = known != names.end() ? known->second : "pid " + std::to_string(pid);
        if (recordings.size() > 1) name += " [" + rec.label + "]";
        TimelineProcess proc{pid, out_pid(pid), name, {}};
        if (traced_pid == std::to_string(pid)) proc.cmdline = split_words(recordings[i]->meta_or("command"));
        rec.processes[pid] = std::move(proc);
      }
      std::vector<Event> samples;
      if (options.split_stack_samples) {
        auto split = std::stable_partition(events.begin(), events.end(),
                                           [](const FlowEvent& fe) { return !is_cpu_stack_sample(fe.event); });
        for (auto it = split; it != events.end(); ++it) samples.push_back(std::move(it->event));
        events.erase(split, events.end());
        std::sort(samples.begin(), samples.end(), [](const Event& a, const Event& b) { return a.start_ns < b.start_ns; });
      }
      for (auto& fe : events)
        if (fe.flow) ++tl.flow_counts[fe.flow];
      // The thread's name: its process's for the main thread, else the process's with the tid and, for a Python
      // thread, its entry function.
      std::string thread_name = names.count(pid) ? names.at(pid) : "pid " + std::to_string(pid);
      if (tid != pid) {
        thread_name += " tid " + std::to_string(tid);
        if (const std::string entry = python_entry(samples); !entry.empty()) thread_name += " (python: " + entry + ")";
      }
      auto lanes = nest_into_lanes(std::move(events));
      for (size_t k = 0; k < lanes.size(); ++k) {
        if (lanes[k].empty() && k > 0) continue;
        TimelineThread th{pid, tid, out_pid(pid), out_pid(tid), static_cast<int>(k), k == 0 ? thread_name : "", {}, {}, {}};
        if (k == 0) th.stack_samples = std::move(samples);
        for (auto& fe : lanes[k]) {
          th.events.push_back(std::move(fe.event));
          th.flow_ids.push_back(fe.flow);
        }
        rec.threads.push_back(std::move(th));
      }
    }
    if (options.samples) {
      std::map<SeriesId, size_t> index;
      recordings[i]->for_each_sample_run(
          [&](const SeriesInfo& s, std::span<const int64_t> t, std::span<const double> v) {
            if (!series_matches(s, options.series_pattern)) return;
            auto [it, fresh] = index.try_emplace(s.id, rec.series.size());
            if (fresh) {
              TimelineSeries ts;
              ts.info = s;
              auto p = pid_of_device(s.device);
              auto proc = p ? rec.processes.find(*p) : rec.processes.end();
              ts.out_pid = proc != rec.processes.end() ? proc->second.out_pid : 0;
              rec.series.push_back(std::move(ts));
            }
            auto& ts = rec.series[it->second];
            for (size_t j = 0; j < t.size(); ++j) {
              ts.t_ns.push_back(t[j] + rec.shift_ns);
              ts.values.push_back(v[j]);
            }
            tl.samples += t.size();
          });
      if (options.derived) {
        auto d = derived_series_of(*recordings[i], options.series_pattern);
        for (auto& info : d.series) {
          TimelineSeries ts;
          ts.info = info;
          if (auto p = pid_of_device(info.device); p && rec.processes.count(*p))
            ts.out_pid = rec.processes[*p].out_pid;
          if (auto it = d.samples.find(info.id); it != d.samples.end()) {
            for (int64_t t : it->second.first) ts.t_ns.push_back(t + rec.shift_ns);
            ts.values = std::move(it->second.second);
          }
          tl.samples += ts.t_ns.size();
          rec.series.push_back(std::move(ts));
        }
      }
      // Blocks of one series arrive in time order per block; merge them into one ordered run.
      for (auto& ts : rec.series) {
        if (std::is_sorted(ts.t_ns.begin(), ts.t_ns.end())) continue;
        std::vector<size_t> order(ts.t_ns.size());
        for (size_t j = 0; j < order.size(); ++j) order[j] = j;
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ts.t_ns[a] < ts.t_ns[b]; });
        std::vector<int64_t> t2;
        std::vector<double> v2;
        for (size_t j : order) {
          t2.push_back(ts.t_ns[j]);
          v2.push_back(ts.values[j]);
        }
        ts.t_ns.swap(t2);
        ts.values.swap(v2);
      }
    }
  }
  // Viewers take unsigned timestamps: move everything right if alignment pushed anything before zero.
  int64_t lowest = 0;
  for (auto& rec : tl.recordings) {
    for (auto& th : rec.threads) {
      for (auto& e : th.events) lowest = std::min(lowest, e.start_ns);
      if (!th.stack_samples.empty()) lowest = std::min(lowest, th.stack_samples.front().start_ns);
    }
    for (auto& s : rec.series)
      if (!s.t_ns.empty()) lowest = std::min(lowest, s.t_ns.front());
    for (auto& inc : rec.incidents) lowest = std::min(lowest, inc.start_ns);
  }
  if (lowest < 0) {
    for (auto& rec : tl.recordings) {
      rec.shift_ns -= lowest;
      for (auto& th : rec.threads) {
        for (auto& e : th.events) e.start_ns -= lowest;
        for (auto& e : th.stack_samples) e.start_ns -= lowest;
      }
      for (auto& s : rec.series)
        for (auto& t : s.t_ns) t -= lowest;
      for (auto& inc : rec.incidents) {
        inc.start_ns -= lowest;
        inc.end_ns -= lowest;
      }
    }
  }
  return tl;
}

}  // namespace stackscope
