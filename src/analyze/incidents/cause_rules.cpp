#include "analyze/incidents/cause_rules.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <regex>
#include <unordered_map>

#include "analyze/robust_stats.h"

namespace stackscope::analyze::incidents {

namespace {

using C = CauseClass;

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_log10_column(const std::string& c) { return c.find("log10") != std::string::npos; }

}  // namespace

// The one place where causes are decided (docs/INCIDENTS.md explains each row). Column names are those of
// window_layer_features.h: DEVICE.NAME.mean / .rate_per_s for series, NAME.log10_count / .median_log10_lat_ns /
// .log10_bytes for calls; cpu.busy_fraction and proc.cpu.others_top_util are derived by the engine.
const std::vector<CauseRule>& cause_rules() {
  static const std::vector<CauseRule> rules{
      {C::cpu_interference,
       {{"host", R"(^cpu\.busy_fraction$)", +1, 0.10, 0, 1, false, "ratio"},
        {"host", R"(^proc\.cpu\.others_util\.mean$)", +1, 0.30, 0, 1, false, "cpus"},
        {"host", R"(^proc\.cpu\.others_top_util$)", +1, 0.30, 0, 1, false, "cpus"},
        // Interference is the job waiting for a CPU: others busy while the job's threads do not wait is not it
        // (a copy storm's process on spare cores). The waiting signals are the keys.
        {"host", R"(^proc\.cpu\.runq_wait\.mean$)", +1, 0.05, 0, 1, false, "s/s", -INFINITY, true},
        {"kernel", R"(^pid\d+\.kernel\.sched\.runq_wait_time\.rate_per_s$)", +1, 5e7, 0, 1, false, "ns/s", -INFINITY, true},
        {"kernel", R"(^pid\d+\.kernel\.sched\.involuntary_switches\.rate_per_s$)", +1, 10, 0, 0.5, false, "1/s"},
        {"host", R"(^pressure\.cpu\.some\.total\.rate_per_s$)", +1, 5e4, 0, 1, false, "us/s", -INFINITY, true},
        {"host", R"(^proc\.running\.mean$)", +1, 1.0, 0, 0.5, false, "threads"},
        {"host", R"(^cpu\.load\.1m\.mean$)", +1, 0.5, 0, 0.25, false, "threads"}}},
      {C::gpu_contention,
       {{"nvml", R"(^gpu\d+\.other_procs\.count$)", +1, 0.5, 0, 1, false, "processes"},
        {"nvml", R"(^gpu\d+\.other_procs\.sm_util$)", +1, 0.05, 0, 1.5, false, "ratio"},
        {"nvml", R"(^gpu\d+\.procs\.count$)", +1, 0.5, 0, 0.5, false, "processes"}}},
      {C::host_stall,
       // Summed over the job's Python threads: the mean number of them blocked (13 in a job with a 12-worker loader).
       {{"python", R"(^python\.offcpu_fraction$)", +1, 0.10, 0, 1, true, "threads blocked"},
        {"python", R"(\(off-cpu\)\.log10_count$)", +1, 0.15, 0, 0.25, false, "log10(1+samples)"},
        {"nvml", R"(^gpu\d+\.gpu\.util\.mean$)", -1, 0.05, 0, 0.5, false, "ratio"},
        {"cuda", R"(^cuda\.log10_calls$)", -1, 0.05, 0, 0.5, false, "log10(1+calls)"},
        // Waiting for a CPU is off-CPU time too: contention speaks for cpu_interference instead.
        {"host", R"(^pressure\.cpu\.some\.total\.rate_per_s$)", +1, 5e4, 0, -0.75, false, "us/s"},
        {"host", R"(^proc\.cpu\.runq_wait\.mean$)", +1, 0.05, 0, -0.75, false, "s/s"},
        {"kernel", R"(^pid\d+\.kernel\.sched\.runq_wait_time\.rate_per_s$)", +1, 5e7, 0, -0.75, false, "ns/s"},
        // A loader blocked on a lossy connection is off-CPU too: packet loss speaks for the network instead (held-out
        // seed 31: a loader fetching over TCP with 15 % loss was a host stall once the retransmits thinned out).
        {"host", R"(^net\.Tcp\.RetransSegs\.rate_per_s$)", +1, 1.0, 0, -1.5, false, "1/s", -INFINITY, false, true},
        // So is a job whose threads wait for memory another process is taking (held-out seed 33, infer: a process
        // faulting in 3 GB/s, the job's Python threads 12 -> 13.1 blocked, read as a host stall).
        {"host", R"(^mem\.available\.fall_share_per_s$)", +1, 0.01, 0, -0.75, false, "1/s"},
        {"host", R"(^pressure\.memory\.some\.total\.rate_per_s$)", +1, 1e4, 0, -0.75, false, "us/s"}}},
      {C::pcie_pressure,
       // The job's own copies: at least 10 MB in a window (log10 7) before they speak for the bus.
       {{"cuda", R"(^cu(da)?Memcpy.*\.log10_bytes$)", +1, 0.3, 0, 1, false, "log10(1+bytes)", 7.0},
        {"cuda", R"(^cu(da)?Memcpy.*\.log10_count$)", +1, 0.3, 0, 0.5, false, "log10(1+calls)", 2.0},
        {"nvml", R"(^gpu\d+\.gpu\.pcie\.(rx|tx)\.mean$)", +1, 1e8, 0.5, 1, false, "bytes/s"}}},
      // The network's own signals are the keys: lower NCCL bandwidth alone is how every collective slowdown looks
      // (the same bytes in more time), so it supports the network only beside packet loss or a busy NIC;
      // without them the episode is a collective slowdown (claimed when nothing else explains it).
      {C::network,
       {{"host", R"(^net\.Tcp\.RetransSegs\.rate_per_s$)", +1, 1.0, 0, 1, false, "1/s", -INFINITY, true, true},
        {"kernel", R"(^kernel\.net\.tcp\.retransmits\.rate_per_s$)", +1, 1.0, 0, 1, false, "1/s", -INFINITY, true, true},
        {"host", R"(^net\.TcpExt\.(TCPLostRetransmit|TCPTimeouts|TCPFastRetrans|TCPSlowStartRetrans)\.rate_per_s$)",
         +1, 1.0, 0, 0.5, false, "1/s", -INFINITY, true, true},
        {"host", R"(^(?!lo\.)[^.]+\.net\.(rx|tx)\.(drop|errs)\.rate_per_s$)", +1, 1.0, 0, 0.5, false, "1/s", -INFINITY,
         true, true},
        {"host", R"(^(?!lo\.)[^.]+\.net\.(rx|tx)\.bytes\.rate_per_s$)", +1, 1e6, 1.0, 0.5, false, "bytes/s", -INFINITY,
         true},
        {"nccl", R"(\.median_log10_bw_Bps$)", -1, 0.1, 0, 0.5, false, "log10(B/s)"}}},
      {C::memory_pressure,
       {{"host", R"(^pressure\.memory\.some\.total\.rate_per_s$)", +1, 1e4, 0, 1, false, "us/s"},
        // Memory being taken: at least 1 % of what was available a second (engine-derived), and page faults at
        // least doubled by 100k/s (a process touching fresh memory; seed 33: 50k -> 700k/s).
        {"host", R"(^mem\.available\.fall_share_per_s$)", +1, 0.01, 0, 1, false, "1/s"},
        {"host", R"(^vm\.pgfault\.rate_per_s$)", +1, 1e5, 1.0, 0.5, false, "1/s"},
        {"host", R"(^vm\.(pgscan_direct|pgscan_kswapd|pgsteal_direct|pgsteal_kswapd|allocstall_\w+)\.rate_per_s$)",
         +1, 100, 0, 1, false, "pages/s"},
        {"host", R"(^vm\.(pswpin|pswpout)\.rate_per_s$)", +1, 10, 0, 1, false, "pages/s"},
        {"host", R"(^vm\.pgmajfault\.rate_per_s$)", +1, 50, 0, 0.5, false, "1/s"},
        {"host", R"(^mem\.MemAvailable\.mean$)", -1, 0, 0.10, 0.5, false, "bytes"},
        {"host", R"(cgroup\.memory\.(refault_anon|refault_file|pgmajfault)\.rate_per_s$)", +1, 50, 0, 0.5, false,
         "1/s"}}},
      {C::storage_stall,
       {{"host", R"(^pressure\.io\.some\.total\.rate_per_s$)", +1, 5e4, 0, 1, false, "us/s"},
        {"host", R"(^[^.]+\.disk\.(io_time|io_weighted_time)\.rate_per_s$)", +1, 100, 0, 1, false, "ms/s"},
        {"host", R"(^cpu\.time\.iowait\.rate_per_s$)", +1, 10, 0, 0.5, false, "jiffies/s"},
        {"kernel", R"(^block.*\.p95_log10_lat_ns$)", +1, 0.3, 0, 0.5, false, "log10(ns)"},
        {"kernel", R"(^kernel\.block\.latency_time\.rate_per_s$)", +1, 1e8, 0, 0.5, false, "ns/s"}}},
      {C::gpu_throttling,
       {{"nvml", R"(^gpu\d+\.gpu\.clock\.sm\.mean$)", -1, 0, 0.10, 1, false, "hertz"},
        {"nvml", R"(^gpu\d+\.gpu\.throttle\.(thermal|power|hw_slowdown)\.mean$)", +1, 0.3, 0, 1, false, "bool"},
        {"nvml", R"(^gpu\d+\.gpu\.temp\.mean$)", +1, 5, 0, 0.5, false, "celsius"},
        // Another process computing on the GPU raises its power and heat: the throttling is then its consequence,
        // and contention the cause (a veto: on H100 a 2.06x contention episode throttled hard enough to outweigh a
        // milder weight, fault seed 23).
        {"nvml", R"(^gpu\d+\.other_procs\.sm_util$)", +1, 0.05, 0, -3, false, "ratio"}}},
      {C::collective_slowdown,
       {{"nccl", R"(\.median_log10_lat_ns$)", +1, 0.1, 0, 1, false, "log10(ns)"},
        {"nccl", R"(^nccl\.busy_fraction$)", +1, 0.1, 0, 0.5, false, "ratio"}},
       true},
  };
  return rules;
}

Shift column_shift(const Eigen::MatrixXd& values, Eigen::Index column, const WindowSet& ws, bool log10_column,
                   bool bursty) {
  // Buffers kept per thread: the online engine takes this over every matching column of every episode in view,
  // every second, and these copies were a good part of it.
  thread_local std::vector<double> base, ep, scratch;
  base.clear();
  ep.clear();
  for (size_t w : ws.baseline) base.push_back(values(static_cast<Eigen::Index>(w), column));
  for (size_t w : ws.episode) ep.push_back(values(static_cast<Eigen::Index>(w), column));
  Shift s;
  s.expected = median(base, scratch);
  s.observed = bursty ? mean_of(ep) : median(ep, scratch);
  if (!std::isfinite(s.expected) || !std::isfinite(s.observed)) return s;
  // Resolution floor: a feature that never moves in the baseline must not put a tiny change many deviations away.
  const double floor = log10_column ? 0.025 : std::max(0.01 * std::abs(s.expected), 1e-9);
  s.z = (s.observed - s.expected) / std::max(robust_sd(base, s.expected, scratch), floor);
  return s;
}

namespace {

struct Support {
  double strength = 0;
  IncidentEvidence evidence;
  std::string column;
};

// Which column names each signal of cause_rules() matches, remembered per thread. The online engine explains every
// episode in view at every pass (each second) over tables of hundreds to thousands of columns (one set per call
// name, per GPU, per NIC) that hardly change from one pass to the next: matching every column against every pattern
// each time was most of its CPU (std::regex's backtracking matcher: 50-70 % of the engine thread beside a traced
// job, seconds a pass on a GPU job). So each pattern is compiled once and each column name matched once per thread
// (each engine has its own: no lock), the answers kept until the cache is full.
class SignalColumnMatcher {
 public:
  // Per signal: -1 not asked yet, 0 no, 1 yes.
  std::vector<int8_t>& of(const std::string& column) {
    auto it = known_.find(column);
    if (it == known_.end()) {
      if (known_.size() >= kMaxColumns) known_.clear();  // a bound for a run whose names keep changing
      it = known_.emplace(column, std::vector<int8_t>(patterns().size(), -1)).first;
    }
    return it->second;
  }
  static bool matches(std::vector<int8_t>& known, size_t signal, const std::string& column) {
    if (known[signal] < 0) known[signal] = std::regex_search(column, patterns()[signal]) ? 1 : 0;
    return known[signal] == 1;
  }

 private:
  static constexpr size_t kMaxColumns = 100'000;
  static const std::vector<std::regex>& patterns() {
    static const std::vector<std::regex> compiled = [] {
      std::vector<std::regex> out;
      for (const CauseRule& rule : cause_rules())
        for (const SignalRule& sig : rule.signals)
          out.emplace_back(sig.pattern, std::regex::ECMAScript | std::regex::optimize);
      return out;
    }();
    return compiled;
  }
  std::unordered_map<std::string, std::vector<int8_t>> known_;
};

// The best-supporting column of one signal among `columns` (those its pattern matches; nullopt: none supports).
std::optional<Support> signal_support(const SignalRule& sig, const std::vector<size_t>& columns,
                                      const WindowFeatureTable& t, const WindowSet& ws, double z_min) {
  std::optional<Support> best;
  for (size_t c : columns) {
    const Shift s = column_shift(t.values, static_cast<Eigen::Index>(c), ws, is_log10_column(t.columns[c]), sig.bursty);
    const double change = sig.direction * (s.observed - s.expected);
    const double dz = sig.direction * s.z;
    if (!(dz >= z_min)) continue;
    if (sig.min_change > 0 && change < sig.min_change) continue;
    if (sig.min_ratio > 0 && change < sig.min_ratio * std::abs(s.expected)) continue;
    if (!(s.observed >= sig.min_observed)) continue;
    const double strength = std::abs(sig.weight) * std::min(dz / z_min, 3.0) / 3.0 * 0.5 + std::abs(sig.weight) * 0.5;
    if (best && best->strength >= strength) continue;
    best = Support{strength, {t.columns[c], sig.unit, sig.layer, s.expected, s.observed, s.z}, t.columns[c]};
  }
  return best;
}

// "pid:4242:stress" -> (4242, "stress")
std::optional<std::pair<int64_t, std::string>> parse_pid_device(const std::string& d) {
  if (d.rfind("pid:", 0) != 0) return std::nullopt;
  const auto colon = d.find(':', 4);
  try {
    const int64_t pid = std::stoll(d.substr(4, colon == std::string::npos ? std::string::npos : colon - 4));
    return std::pair{pid, colon == std::string::npos ? std::string() : d.substr(colon + 1)};
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// "gpu0/pid42" or "gpu0/pid42/python" -> ("gpu0", 42, "python")
struct GpuProc {
  std::string gpu, comm;
  int64_t pid = 0;
};
std::optional<GpuProc> parse_gpu_proc(const std::string& d) {
  const auto at = d.find("/pid");
  if (at == std::string::npos) return std::nullopt;
  const auto slash = d.find('/', at + 4);
  try {
    GpuProc g{d.substr(0, at), slash == std::string::npos ? "" : d.substr(slash + 1),
              std::stoll(d.substr(at + 4, slash == std::string::npos ? std::string::npos : slash - at - 4))};
    return g;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

double mean_over(const std::vector<double>& v, const std::vector<size_t>& windows) {
  double s = 0;
  for (size_t w : windows) s += w < v.size() && std::isfinite(v[w]) ? v[w] : 0.0;
  return windows.empty() ? 0 : s / static_cast<double>(windows.size());
}

std::vector<Culprit> culprits_for(CauseClass cls, const ClassScore& score, const std::vector<EntitySeries>& entities,
                                  const std::set<uint32_t>& job_pids, const std::set<std::string>& gpus,
                                  const WindowSet& ws) {
  std::vector<Culprit> out;
  // Memory being taken now (not only reclaim or PSI, which outlast the process that caused them).
  const bool memory_taken =
      cls == C::memory_pressure && std::any_of(score.columns.begin(), score.columns.end(), [](const std::string& c) {
        return c == "mem.available.fall_share_per_s" || c == "vm.pgfault.rate_per_s";
      });
  if (cls == C::cpu_interference || memory_taken) {
    // Other processes whose CPU use rose the most from the steady windows to the episode. Memory: a process taking
    // memory at GB/s keeps a core busy faulting it in (seed 33: ss_memhog at 1.0 CPU while available memory fell
    // 3 GB/s), so at least half a CPU; the kernel's reclaim threads are the pressure's effect, not its culprit.
    const double min_rise = cls == C::memory_pressure ? 0.5 : 0.2;
    for (const auto& e : entities) {
      if (e.name != "proc.cpu.util") continue;
      auto p = parse_pid_device(e.device);
      if (!p || job_pids.count(static_cast<uint32_t>(p->first)) || p->second == "stackscope") continue;
      if (cls == C::memory_pressure && (p->second.rfind("kswapd", 0) == 0 || p->second.rfind("kcompactd", 0) == 0))
        continue;
      const double rise = mean_over(e.values, ws.episode) - mean_over(e.values, ws.baseline);
      // pid 0: the recorder summed processes beyond its series budget by name.
      if (rise >= min_rise)
        out.push_back({"process", p->second, p->first > 0 ? std::optional<int64_t>(p->first) : std::nullopt, rise});
    }
  } else if (cls == C::gpu_contention) {
    std::map<std::pair<std::string, int64_t>, std::string> names;
    for (const auto& e : entities)
      if (e.name == "gpu.proc.present")
        if (auto g = parse_gpu_proc(e.device); g && !g->comm.empty()) names[{g->gpu, g->pid}] = g->comm;
    for (const auto& e : entities) {
      if (e.name != "gpu.proc.sm_util") continue;
      auto g = parse_gpu_proc(e.device);
      if (!g || job_pids.count(static_cast<uint32_t>(g->pid)) || (!gpus.empty() && !gpus.count(g->gpu))) continue;
      const double during = mean_over(e.values, ws.episode), before = mean_over(e.values, ws.baseline);
      size_t present = 0;
      for (size_t w : ws.episode) present += w < e.values.size() && std::isfinite(e.values[w]);
      if (present * 2 < ws.episode.size() || during < before) continue;
      auto n = names.find({g->gpu, g->pid});
      out.push_back({"process", n != names.end() ? n->second : "pid " + std::to_string(g->pid), g->pid,
                     during - before});
    }
  } else if (cls == C::host_stall) {
    // The Python function the job blocked in: its off-CPU samples rose the most.
    for (const auto& ev : score.evidence) {
      const std::string suffix = "_(off-cpu).log10_count";
      if (ends_with(ev.metric, suffix)) {
        out.push_back({"function", ev.metric.substr(0, ev.metric.size() - suffix.size()), std::nullopt,
                       ev.observed - ev.expected});
        break;
      }
    }
  } else if (cls == C::pcie_pressure || cls == C::gpu_throttling || cls == C::network || cls == C::storage_stall) {
    // The device named in the strongest per-device column (gpu0.gpu.clock.sm.mean -> gpu0, eth0.net... -> eth0).
    for (const auto& ev : score.evidence) {
      const auto dot = ev.metric.find('.');
      if (dot == std::string::npos) continue;
      const std::string dev = ev.metric.substr(0, dot);
      // A device's own column starts with its name: "eth0.net.rx.drop"; "kernel.net.tcp.retransmits" (every
      // interface's TCP) names no link.
      const bool per_device = ev.metric.compare(dot, 5, ".net.") == 0 || ev.metric.compare(dot, 6, ".disk.") == 0;
      if (dev.rfind("gpu", 0) == 0 || (per_device && dev != "kernel")) {
        out.push_back({cls == C::network ? "link" : "device", dev, std::nullopt, 0});
        break;
      }
    }
  } else if (cls == C::collective_slowdown) {
    for (const auto& ev : score.evidence)
      if (const auto at = ev.metric.find(".median_log10_lat_ns"); at != std::string::npos) {
        out.push_back({"function", ev.metric.substr(0, at), std::nullopt, 0});
        break;
      }
  }
  std::sort(out.begin(), out.end(), [](const Culprit& a, const Culprit& b) { return a.share > b.share; });
  if (out.size() > 3) out.resize(3);
  return out;
}

}  // namespace

std::set<std::string> job_gpus(const std::vector<EntitySeries>& entities, const std::set<uint32_t>& job_pids) {
  std::set<std::string> out;
  for (const auto& e : entities)
    if (e.name == "gpu.proc.present")
      if (auto g = parse_gpu_proc(e.device); g && job_pids.count(static_cast<uint32_t>(g->pid))) out.insert(g->gpu);
  return out;
}

namespace {

// "gpu3.gpu.clock.sm.mean" -> "gpu3"; "" for a column that is not one GPU's.
std::string_view gpu_of_column(const std::string& column) {
  if (column.rfind("gpu", 0) != 0) return {};
  size_t i = 3;
  while (i < column.size() && std::isdigit(static_cast<unsigned char>(column[i]))) ++i;
  if (i == 3 || i >= column.size() || column[i] != '.') return {};
  return std::string_view(column).substr(0, i);
}

}  // namespace

SignalColumns match_signal_columns(const std::map<std::string, WindowFeatureTable>& tables,
                                   const std::set<std::string>& job_gpus) {
  thread_local SignalColumnMatcher matcher;
  SignalColumns out;
  out.job_gpus = job_gpus;
  std::map<std::string, std::vector<size_t>> signals_of;  // by layer
  for (const CauseRule& rule : cause_rules())
    for (const SignalRule& sig : rule.signals) {
      signals_of[sig.layer].push_back(out.by_signal.size());
      out.by_signal.emplace_back();
    }
  for (const auto& [layer, t] : tables) {
    auto sigs = signals_of.find(layer);
    if (sigs == signals_of.end()) continue;
    for (size_t c = 0; c < t.columns.size(); ++c) {
      if (!job_gpus.empty())
        if (const std::string_view gpu = gpu_of_column(t.columns[c]); !gpu.empty() && !job_gpus.count(std::string(gpu)))
          continue;
      auto& known = matcher.of(t.columns[c]);
      for (size_t i : sigs->second)
        if (SignalColumnMatcher::matches(known, i, t.columns[c])) out.by_signal[i].push_back(c);
    }
  }
  return out;
}

CauseVerdict explain_episode(const std::map<std::string, WindowFeatureTable>& tables,
                             const std::vector<EntitySeries>& entities, const std::set<uint32_t>& job_pids,
                             const WindowSet& ws, const CauseOptions& opt) {
  return explain_episode(tables, entities, job_pids, ws, opt, match_signal_columns(tables, job_gpus(entities, job_pids)));
}

CauseVerdict explain_episode(const std::map<std::string, WindowFeatureTable>& tables,
                             const std::vector<EntitySeries>& entities, const std::set<uint32_t>& job_pids,
                             const WindowSet& ws, const CauseOptions& opt, const SignalColumns& matched) {
  CauseVerdict v;
  if (ws.episode.empty() || ws.baseline.size() < 3) return v;
  std::vector<ClassScore> scores;
  size_t signal = 0;  // index of the next signal in cause_rules()
  for (const CauseRule& rule : cause_rules()) {
    ClassScore cs;
    cs.cls = rule.cls;
    bool required_ok = true;
    const bool has_keys = std::any_of(rule.signals.begin(), rule.signals.end(), [](const SignalRule& r) { return r.key; });
    bool key_seen = false;
    std::vector<Support> supports;
    for (const SignalRule& sig : rule.signals) {
      const size_t index = signal++;
      auto t = tables.find(sig.layer);
      std::optional<Support> s;
      if (t != tables.end() && index < matched.by_signal.size())
        s = signal_support(sig, matched.by_signal[index], t->second, ws, opt.z);
      if (!s) {
        required_ok = required_ok && !sig.required;
        continue;
      }
      key_seen = key_seen || sig.key;
      if (sig.weight < 0) {
        cs.score -= s->strength;
        continue;
      }
      cs.score += s->strength;
      supports.push_back(*s);
    }
    if (!required_ok || (has_keys && !key_seen) || supports.empty() || cs.score <= 0) continue;
    std::sort(supports.begin(), supports.end(), [](auto& a, auto& b) {
      return a.strength != b.strength ? a.strength > b.strength : std::abs(a.evidence.z) > std::abs(b.evidence.z);
    });
    for (auto& s : supports) {
      cs.evidence.push_back(s.evidence);
      cs.columns.push_back(s.column);
    }
    scores.push_back(std::move(cs));
  }
  // A class claimed only when nothing else explains the episode.
  const bool others = std::any_of(scores.begin(), scores.end(), [](const ClassScore& s) {
    const auto& rules = cause_rules();
    return !std::find_if(rules.begin(), rules.end(), [&](const CauseRule& r) { return r.cls == s.cls; })->only_alone;
  });
  if (others)
    std::erase_if(scores, [](const ClassScore& s) {
      const auto& rules = cause_rules();
      return std::find_if(rules.begin(), rules.end(), [&](const CauseRule& r) { return r.cls == s.cls; })->only_alone;
    });
  std::sort(scores.begin(), scores.end(), [](auto& a, auto& b) { return a.score > b.score; });
  v.scores = scores;
  if (scores.empty()) return v;
  const double best = scores[0].score, second = scores.size() > 1 ? scores[1].score : 0.0;
  v.cause.cls = scores[0].cls;
  v.cause.confidence = std::clamp(best / (best + second + 0.5), 0.05, 0.99);
  v.cause.evidence = scores[0].evidence;
  v.cause.culprits = culprits_for(scores[0].cls, scores[0], entities, job_pids, matched.job_gpus, ws);
  for (size_t i = 1; i < scores.size(); ++i) v.also.push_back(scores[i].cls);
  return v;
}

}  // namespace stackscope::analyze::incidents
