#include "store/recording_timeline_reader.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <span>
#include <regex>
#include <set>
#include <stdexcept>

#include "store/recording_reader.h"

namespace stackscope {

namespace {

std::string arg_text(const Event& e, std::string_view key) {
  const ArgValue* v = e.arg(key);
  if (!v) return "";
  if (auto* s = std::get_if<std::string>(v)) return *s;
  if (auto* i = std::get_if<int64_t>(v)) return std::to_string(*i);
  return std::to_string(std::get<double>(*v));
}

bool is_sync_call(const std::string& name) { return name.find("Synchronize") != std::string::npos; }

// Device memory from the driver (not pinned host memory: cudaHostAlloc, cuMemHostAlloc, cuMemFreeHost).
bool is_device_alloc(const std::string& name) {
  for (const char* p : {"cudaMalloc", "cudaFree", "cuMemAlloc", "cuMemFree"})
    if (name.rfind(p, 0) == 0) return name.find("Host") == std::string::npos && name.find("Array") == std::string::npos;
  return false;
}

// A Python thread blocked in a collective or a barrier of torch.distributed, in DDP, or in the autograd engine
// (where DDP's all-reduce is awaited at the end of backward) waits for other ranks: a synchronisation. Blocked
// anywhere else (a sleep, a data loader's queue, a file, the rendezvous's store at start-up) is host time.
bool waits_for_peers(const std::string& file, const std::string& stack) {
  for (const char* where : {"torch/nn/parallel/", "torch/autograd/"})
    if (file.find(where) != std::string::npos) return true;
  static const std::set<std::string, std::less<>> kCollectives = {
      "all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor", "broadcast",
      "barrier", "monitored_barrier", "all_to_all", "all_to_all_single", "reduce", "gather", "scatter", "send",
      "recv", "synchronize"};
  // Any frame: a wrapper of the user's may call the collective.
  size_t b = 0;
  while (b <= stack.size()) {
    size_t e = stack.find(';', b);
    if (e == std::string::npos) e = stack.size();
    std::string_view frame(stack.data() + b, e - b);
    if (const size_t dot = frame.rfind('.'); dot != std::string_view::npos) frame.remove_prefix(dot + 1);
    if (kCollectives.count(frame)) return true;
    b = e + 1;
  }
  return false;
}

struct ProcessIdentity {
  int rank = -1, local_rank = -1;
  std::string visible_devices;
};

// Notes "pid 123: RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 ..." written by the recorder (the last one of a pid wins:
// a child seen before its exec was noted with its parent's environment).
std::map<uint32_t, ProcessIdentity> identities(const RecordingReader& reader) {
  std::map<uint32_t, ProcessIdentity> out;
  static const std::regex note(R"(^pid (\d+): (.*)$)");
  for (const auto& n : reader.notes()) {
    if (n.source != "process") continue;
    std::smatch m;
    if (!std::regex_match(n.text, m, note)) continue;
    ProcessIdentity id;
    const std::string vars = m[2];
    size_t b = 0;
    while (b < vars.size()) {
      size_t e = vars.find(' ', b);
      if (e == std::string::npos) e = vars.size();
      const std::string kv = vars.substr(b, e - b);
      const size_t eq = kv.find('=');
      if (eq != std::string::npos) {
        const std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
        try {
          if (k == "RANK") id.rank = std::stoi(v);
          if (k == "LOCAL_RANK") id.local_rank = std::stoi(v);
        } catch (const std::exception&) {
        }
        if (k == "CUDA_VISIBLE_DEVICES") id.visible_devices = v;
      }
      b = e + 1;
    }
    out[static_cast<uint32_t>(std::stoul(m[1]))] = id;
  }
  return out;
}

// The deepest frame shared by nearly all of a worker's stack samples: where its training loop runs.
std::string common_loop_frame(const std::vector<std::string>& stacks) {
  if (stacks.size() < 20) return "";
  std::map<std::string, size_t> prefix_count;  // "a;b;c" prefixes
  for (auto& s : stacks) {
    size_t p = 0;
    while (true) {
      p = s.find(';', p);
      prefix_count[s.substr(0, p)]++;
      if (p == std::string::npos) break;
      ++p;
    }
  }
  std::string best;
  for (auto& [prefix, n] : prefix_count)
    if (n * 10 >= stacks.size() * 9 && prefix.size() > best.size()) best = prefix;
  const size_t cut = best.rfind(';');
  return cut == std::string::npos ? best : best.substr(cut + 1);
}

// "gpu3/pid42" or "gpu3/pid42/python3" -> (3, 42, "python3"); nullopt otherwise.
struct GpuProcess {
  int gpu = -1;
  uint32_t pid = 0;
  std::string comm;
};
std::optional<GpuProcess> parse_gpu_process(const std::string& device) {
  static const std::regex re(R"(^gpu(\d+)/pid(\d+)(?:/(.*))?$)");
  std::smatch m;
  if (!std::regex_match(device, m, re)) return std::nullopt;
  try {
    return GpuProcess{std::stoi(m[1]), static_cast<uint32_t>(std::stoul(m[2])), m[3]};
  } catch (const std::exception&) {  // digits out of range: not a device this recorder writes
    return std::nullopt;
  }
}

// What the recording's series say about each rank's GPU: which GPU its process used (NVML's per-process
// series), its SM utilisation, other processes busy on that GPU, throttling; and when the launch probes were
// attached (a cost budget samples them).
void read_gpu_context(const RecordingReader& reader, int64_t shift, std::map<uint32_t, WorkerTimeline>& by_pid,
                      const std::map<uint32_t, ProcessIdentity>& identity, const std::map<uint32_t, int>& rank_of,
                      TimelineSet& set) {
  std::map<uint32_t, int> gpu_of_pid;
  std::map<int, std::map<int64_t, double>> others_util, throttled, mem_used;  // per GPU, per time
  std::map<int, double> mem_total;
  std::vector<std::pair<int64_t, double>> retransmits, runnable;
  int cpus = 0;
  try {
    cpus = std::stoi(reader.meta_or("cpu_count", "0"));
  } catch (const std::exception&) {
  }
  std::map<int, std::set<std::string>> others_names;
  // Processes that are not ranks, per GPU: when NVML listed them there, and their SM utilisation (sum, samples).
  std::map<int, std::map<uint32_t, std::pair<int64_t, int64_t>>> others_listed;
  std::map<uint32_t, std::pair<double, int>> others_sm;
  std::map<uint32_t, std::string> comm_of;
  std::vector<std::pair<int64_t, double>> watching;
  std::map<std::string, std::pair<double, int>> busy_others;  // "comm pid N" -> (sum of CPU samples, samples)
  // A process of the job has a rank (its own, or inherited by a data-loader worker); a process noted only for
  // its CUDA_VISIBLE_DEVICES is another user of the GPU.
  auto job_process = [&](uint32_t pid) {
    auto it = identity.find(pid);
    return rank_of.count(pid) || (it != identity.end() && it->second.rank >= 0);
  };
  reader.for_each_sample_run([&](const SeriesInfo& info, std::span<const int64_t> t, std::span<const double> v) {
    if (info.name == "trace.cuda.watching") {
      for (size_t i = 0; i < t.size(); ++i) watching.emplace_back(t[i] + shift, v[i]);
      return;
    }
    // The kernel layer's per-process scheduler counters ("pid123"): run-queue wait and on-CPU time of a rank.
    if ((info.name == "kernel.sched.runq_wait_time" || info.name == "kernel.sched.oncpu_time") &&
        info.device.rfind("pid", 0) == 0) {
      const uint32_t pid = static_cast<uint32_t>(std::strtoul(info.device.c_str() + 3, nullptr, 10));
      if (auto it = by_pid.find(pid); it != by_pid.end()) {
        auto& dst = info.name == "kernel.sched.oncpu_time" ? it->second.oncpu_ns : it->second.runq_wait_ns;
        for (size_t i = 0; i < t.size(); ++i) dst.emplace_back(t[i] + shift, v[i]);
      }
      return;
    }
    // The host layer's busiest processes ("pid:123:comm", CPUs): those that are not the job's.
    if (info.name == "proc.cpu.util" && info.device.rfind("pid:", 0) == 0) {
      const size_t colon = info.device.find(':', 4);
      const uint32_t pid = static_cast<uint32_t>(std::strtoul(info.device.c_str() + 4, nullptr, 10));
      if (colon == std::string::npos || by_pid.count(pid) || job_process(pid)) return;
      auto& [sum, count] = busy_others[info.device.substr(colon + 1) + " pid " + std::to_string(pid)];
      for (size_t i = 0; i < t.size(); ++i) {
        sum += v[i];
        ++count;
      }
      return;
    }
    if (info.name == "proc.running" && info.device.empty()) {
      for (size_t i = 0; i < t.size(); ++i) runnable.emplace_back(t[i] + shift, v[i]);
      return;
    }
    if (info.name == "kernel.net.tcp.retransmits" && info.device.empty()) {
      for (size_t i = 0; i < t.size(); ++i) retransmits.emplace_back(t[i] + shift, v[i]);
      return;
    }
    if ((info.name == "gpu.mem.used" || info.name == "gpu.mem.total") && info.device.rfind("gpu", 0) == 0 &&
        info.device.find('/') == std::string::npos) {
      try {
        const int g = std::stoi(info.device.substr(3));
        for (size_t i = 0; i < t.size(); ++i)
          if (info.name == "gpu.mem.total") mem_total[g] = v[i];
          else mem_used[g][t[i] + shift] = v[i];
      } catch (const std::exception&) {
      }
      return;
    }
    if (info.name.rfind("gpu.throttle.", 0) == 0 && info.name != "gpu.throttle.reasons" &&
        info.device.rfind("gpu", 0) == 0 && info.device.find('/') == std::string::npos) {
      try {
        auto& m = throttled[std::stoi(info.device.substr(3))];
        for (size_t i = 0; i < t.size(); ++i) m[t[i] + shift] = std::max(m[t[i] + shift], v[i] > 0 ? 1.0 : 0.0);
      } catch (const std::exception&) {
      }
      return;
    }
    if (info.name != "gpu.proc.sm_util" && info.name != "gpu.proc.present") return;
    const auto g = parse_gpu_process(info.device);
    if (!g) return;
    if (info.name == "gpu.proc.present") {
      if (!g->comm.empty()) comm_of[g->pid] = g->comm;
      if (by_pid.count(g->pid)) gpu_of_pid[g->pid] = g->gpu;
      else if (!job_process(g->pid) && !t.empty()) {
        auto [it, fresh] = others_listed[g->gpu].try_emplace(g->pid, t.front() + shift, t.back() + shift);
        it->second.first = std::min(it->second.first, t.front() + shift);
        it->second.second = std::max(it->second.second, t.back() + shift);
      }
      return;
    }
    if (auto it = by_pid.find(g->pid); it != by_pid.end()) {
      gpu_of_pid[g->pid] = g->gpu;
      for (size_t i = 0; i < t.size(); ++i) it->second.gpu_sm_util.emplace_back(t[i] + shift, v[i]);
    } else if (!job_process(g->pid)) {
      auto& m = others_util[g->gpu];
      auto& [sum, count] = others_sm[g->pid];
      bool busy = false;
      for (size_t i = 0; i < t.size(); ++i) {
        m[t[i] + shift] += v[i];
        busy |= v[i] > 0;
        sum += v[i];
        ++count;
      }
      if (busy) others_names[g->gpu].insert("pid " + std::to_string(g->pid));
    }
  });
  std::sort(retransmits.begin(), retransmits.end());
  std::sort(runnable.begin(), runnable.end());
  // Mean CPU use over the recording (a process sampled only while among the busiest counts 0 elsewhere: the
  // recorder's samples of it are fewer, so its mean is over the samples of the busiest one).
  int most_samples = 0;
  for (auto& [name, sc] : busy_others) most_samples = std::max(most_samples, sc.second);
  std::vector<std::pair<std::string, double>> others_busy;
  for (auto& [name, sc] : busy_others)
    if (most_samples > 0 && sc.first / most_samples >= 0.05) others_busy.emplace_back(name, sc.first / most_samples);
  std::sort(others_busy.begin(), others_busy.end(), [](auto& a, auto& b) { return a.second > b.second; });
  if (others_busy.size() > 5) others_busy.resize(5);
  for (auto& [pid, w] : by_pid) {
    std::sort(w.gpu_sm_util.begin(), w.gpu_sm_util.end());
    std::sort(w.runq_wait_ns.begin(), w.runq_wait_ns.end());
    std::sort(w.oncpu_ns.begin(), w.oncpu_ns.end());
    w.host_others_busy = others_busy;
    w.tcp_retransmits = retransmits;
    w.host_runnable = runnable;
    w.host_cpus = cpus;
    auto it = gpu_of_pid.find(pid);
    if (it == gpu_of_pid.end()) continue;
    w.gpu = "gpu" + std::to_string(it->second);  // NVML saw the process there: no guess from LOCAL_RANK
    if (auto o = others_util.find(it->second); o != others_util.end())
      w.gpu_others_sm_util.assign(o->second.begin(), o->second.end());
    if (auto o = throttled.find(it->second); o != throttled.end()) w.gpu_throttled.assign(o->second.begin(), o->second.end());
    if (auto o = mem_used.find(it->second); o != mem_used.end() && mem_total[it->second] > 0)
      for (auto& [t, used] : o->second) w.gpu_mem_used.emplace_back(t, used / mem_total[it->second]);
    for (auto& [other, span] : others_listed[it->second]) {
      const auto sm = others_sm.find(other);
      if (sm == others_sm.end() || sm->second.second == 0) continue;
      const double util = sm->second.first / sm->second.second;
      if (util < 0.05) continue;  // listed, but not seen computing (a context left open, a monitor)
      w.gpu_others_spans.push_back(span);
      w.gpu_others_util = std::max(w.gpu_others_util, util);
    }
    std::sort(w.gpu_others_spans.begin(), w.gpu_others_spans.end());
    for (auto& name : others_names[it->second]) {
      const uint32_t other = static_cast<uint32_t>(std::strtoul(name.c_str() + 4, nullptr, 10));
      w.gpu_others += (w.gpu_others.empty() ? "" : ", ") + (comm_of.count(other) ? comm_of[other] + " " : "") + name;
    }
  }
  // Watched spans: from each 1 to the next 0.
  std::sort(watching.begin(), watching.end());
  int64_t on = -1;
  for (auto& [t, v] : watching) {
    if (v > 0 && on < 0) on = t;
    if (v <= 0 && on >= 0) {
      set.launches_watched.emplace_back(on, t);
      on = -1;
    }
  }
  if (on >= 0) set.launches_watched.emplace_back(on, INT64_MAX);
}

}  // namespace

void read_recording_timelines(const std::string& path, TimelineSet& set) {
  RecordingReader reader(path);
  const int64_t shift = reader.summary().realtime_offset_ns;
  const std::string host = reader.meta_or("host", path.substr(path.find_last_of('/') + 1));
  const auto identity = identities(reader);
  std::map<uint32_t, WorkerTimeline> by_pid;
  std::map<uint32_t, int> rank_of;
  std::map<uint32_t, std::vector<std::string>> stacks;
  // NCCL communicators are pointers, different in every process: the n-th communicator of a given size a
  // process used is the same one on every rank (DDP's default group first, then subgroups in creation order).
  std::map<std::pair<uint32_t, std::string>, std::string> comm_key;
  std::map<std::pair<uint32_t, int64_t>, int> comms_of_size;
  bool any_nccl = false;
  EventFilter filter;
  filter.layers = {Layer::nccl, Layer::torch, Layer::cuda, Layer::python};
  reader.for_each_event(filter, [&](const Event& e) {
    if (e.layer == Layer::cuda && e.name.find("aunch") != std::string::npos) {
      by_pid[e.pid].gpu_launch_ns.push_back(e.start_ns + shift);  // budgeted detail records launches as instants
      return;
    }
    if (e.layer == Layer::cuda && is_device_alloc(e.name)) {
      by_pid[e.pid].gpu_alloc_ns.push_back(e.start_ns + shift);
      return;
    }
    if (e.flags & kEventInstant) return;
    TimelineOp op;
    op.name = 0;
    if (e.layer == Layer::nccl) {
      any_nccl = true;
      // ncclBcast calls ncclBroadcast: both are probed, the inner call (depth 1) is the same collective.
      if (e.arg_int("depth", 0) > 0) return;
      const std::string lname = e.name;
      op.kind = (lname.find("Send") != std::string::npos || lname.find("Recv") != std::string::npos) ? OpKind::p2p
                                                                                                     : OpKind::collective;
      const std::string comm = arg_text(e, "comm");
      if (!comm.empty()) {
        const int64_t nranks = e.arg_int("nranks", -1);
        auto [it, fresh] = comm_key.try_emplace({e.pid, comm});
        if (fresh) it->second = "comm:n" + std::to_string(nranks) + "#" + std::to_string(comms_of_size[{e.pid, nranks}]++);
        op.comm = set.intern(it->second);
      }
      op.bytes = e.arg_int("bytes", e.arg_int("count", 0));
      const int64_t rank = e.arg_int("rank", -1);
      if (rank >= 0 && !rank_of.count(e.pid)) rank_of[e.pid] = static_cast<int>(rank);
    } else if (e.layer == Layer::torch) {
      op.kind = OpKind::compute;
    } else if (e.layer == Layer::cuda && is_sync_call(e.name)) {
      op.kind = OpKind::sync;
    } else if (e.layer == Layer::python && e.arg("sample")) {
      // Stack samples (record's default Python mode): on-CPU ones say where CPU time went, off-CPU ones how
      // long the thread was blocked and in which function.
      const std::string stack = arg_text(e, "stack");
      stacks[e.pid].push_back(stack);
      auto& w = by_pid[e.pid];
      const bool offcpu = arg_text(e, "sample") == "off-cpu";
      std::string leaf = e.name;
      if (offcpu && leaf.size() > 10 && leaf.compare(leaf.size() - 10, 10, " (off-cpu)") == 0) leaf.resize(leaf.size() - 10);
      op.start_ns = e.start_ns + shift;
      op.duration_ns = std::max<int64_t>(0, e.duration_ns);
      op.stream = static_cast<int32_t>(e.tid);
      if (!offcpu) {
        op.kind = OpKind::compute;
        op.name = set.intern(leaf);
        w.cpu_samples.push_back(op);
        return;
      }
      op.kind = waits_for_peers(arg_text(e, "file"), stack) ? OpKind::sync : OpKind::offcpu;
      op.name = set.intern(leaf + (op.kind == OpKind::sync ? " (wait)" : " (off-cpu)"));
      w.ops.push_back(op);
      return;
    } else {
      return;  // kernel launches: host enqueue cost only, not the work
    }
    op.name = set.intern(e.name);
    op.start_ns = e.start_ns + shift;
    op.duration_ns = std::max<int64_t>(0, e.duration_ns);
    op.stream = static_cast<int32_t>(e.tid);
    by_pid[e.pid].ops.push_back(op);
  });
  if (any_nccl) set.collectives_include_wait = false;  // a recorded NCCL call is its host enqueue
  // A Python thread blocked inside a CUDA synchronisation is that synchronisation (already an operation, with
  // its exact duration): its off-CPU stack sample would count the same wait twice, once as host time.
  for (auto& [pid, w] : by_pid) {
    std::map<int32_t, std::vector<std::pair<int64_t, int64_t>>> syncs;  // thread -> CUDA sync spans
    for (auto& op : w.ops)
      if (op.kind == OpKind::sync && set.names[op.name].find("(wait)") == std::string::npos)
        syncs[op.stream].push_back({op.start_ns, op.end_ns()});
    if (syncs.empty()) continue;
    for (auto& [tid, v] : syncs) std::sort(v.begin(), v.end());
    std::erase_if(w.ops, [&](const TimelineOp& op) {
      const std::string& nm = set.names[op.name];
      const bool from_python = nm.find("(wait)") != std::string::npos || nm.find("(off-cpu)") != std::string::npos;
      if (!from_python) return false;
      auto it = syncs.find(op.stream);
      if (it == syncs.end()) return false;
      int64_t overlap = 0;
      for (auto& [a, b] : it->second) {
        if (a >= op.end_ns()) break;
        overlap += std::max<int64_t>(0, std::min(b, op.end_ns()) - std::max(a, op.start_ns));
      }
      return 2 * overlap >= op.duration_ns;
    });
  }
  // A launcher, a data-loader worker or a compile helper is not a training rank: when some processes have a
  // rank, the others are dropped; otherwise those that never ran an operator nor waited for a peer are.
  auto has_rank = [&](uint32_t pid) {
    return rank_of.count(pid) || (identity.count(pid) && identity.at(pid).rank >= 0);
  };
  const bool ranks_known = std::any_of(by_pid.begin(), by_pid.end(), [&](auto& kv) { return has_rank(kv.first); });
  const size_t processes_seen = by_pid.size();
  for (auto it = by_pid.begin(); it != by_pid.end();) {
    const bool works = std::any_of(it->second.ops.begin(), it->second.ops.end(), [](auto& op) { return op.kind != OpKind::offcpu; });
    if (ranks_known ? !has_rank(it->first) : !works) it = by_pid.erase(it);
    else ++it;
  }
  // Processes a rank forked (data-loader workers) inherit its RANK: one process per rank, the one whose NCCL
  // calls said that rank, else the one that did the most work (operators, syncs, collectives).
  if (ranks_known) {
    auto rank_for = [&](uint32_t pid) { return rank_of.count(pid) ? rank_of.at(pid) : identity.at(pid).rank; };
    auto work_of = [&](uint32_t pid) {
      const auto& ops = by_pid.at(pid).ops;
      return std::count_if(ops.begin(), ops.end(), [](auto& op) { return op.kind != OpKind::offcpu; });
    };
    std::map<int, uint32_t> main_of_rank;
    for (auto& [pid, w] : by_pid) {
      auto [it, fresh] = main_of_rank.try_emplace(rank_for(pid), pid);
      if (fresh) continue;
      const uint32_t other = it->second;
      const bool mine = rank_of.count(pid) > rank_of.count(other) ||
                        (rank_of.count(pid) == rank_of.count(other) && work_of(pid) > work_of(other));
      if (mine) it->second = pid;
    }
    std::erase_if(by_pid, [&](const auto& kv) { return main_of_rank.at(rank_for(kv.first)) != kv.first; });
  }
  // A one-process job sampled on the CPU has events, but none that makes it a rank: say that, not "no events".
  if (by_pid.empty() && processes_seen > 0)
    throw std::runtime_error(path + ": no rank to compare: the " + std::to_string(processes_seen) +
                             " process(es) recorded have no torch-operator, CUDA-synchronisation or NCCL-collective "
                             "events and no rank (stragglers compares the ranks of a multi-process job; `analyze` "
                             "judges a single process)");
  if (by_pid.empty())
    throw std::runtime_error(path + ": no nccl, torch, cuda synchronisation or Python stack-sample events to analyse");
  read_gpu_context(reader, shift, by_pid, identity, rank_of, set);
  for (auto& [pid, w] : by_pid) {
    auto it = rank_of.find(pid);
    auto id = identity.find(pid);
    w.rank = it != rank_of.end() ? it->second : id != identity.end() ? id->second.rank : -1;
    w.pid = pid;
    w.host = host;
    if (id != identity.end()) {
      w.local_rank = id->second.local_rank;
      // The GPU a torchrun worker uses by convention: cuda:LOCAL_RANK among its visible devices.
      const std::string& vis = id->second.visible_devices;
      if (!w.gpu.empty()) {
      } else if (!vis.empty() && vis.find(',') == std::string::npos) {
        w.gpu = "gpu" + vis;
      } else if (w.local_rank >= 0 && any_nccl) {
        w.gpu = "gpu" + std::to_string(w.local_rank) + "?";
      }
    }
    w.worker = host + (w.rank >= 0 ? ":rank" + std::to_string(w.rank) : ":pid" + std::to_string(pid));
    w.loop_function = common_loop_frame(stacks[pid]);
    std::stable_sort(w.ops.begin(), w.ops.end(), [](auto& a, auto& b) { return a.start_ns < b.start_ns; });
    std::stable_sort(w.cpu_samples.begin(), w.cpu_samples.end(), [](auto& a, auto& b) { return a.start_ns < b.start_ns; });
    std::sort(w.gpu_launch_ns.begin(), w.gpu_launch_ns.end());
    std::sort(w.gpu_alloc_ns.begin(), w.gpu_alloc_ns.end());
    set.workers.push_back(std::move(w));
  }
}

}  // namespace stackscope
