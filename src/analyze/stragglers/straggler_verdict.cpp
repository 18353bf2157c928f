// The waiting signal and a verdict that can say no. KAIR's stages rank workers and operators; they always
// name somebody. Here the question is whether anybody made the others wait: at each synchronisation point the
// rank that arrived last waited least, so lateness = (longest wait there) - (own wait) is measured on each
// worker's own clock, with no clock alignment between hosts. Verdicts: nobody (none), one rank, a group
// (ranks clearly apart from the rest), or a spread (ranks late by graded amounts, no culprit).
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include "analyze/stragglers/straggler.h"

namespace stackscope::analyze {

std::string_view verdict_kind_name(VerdictKind k) {
  switch (k) {
    case VerdictKind::none: return "none";
    case VerdictKind::one_straggler: return "one-straggler";
    case VerdictKind::slow_group: return "slow-group";
    case VerdictKind::spread: return "spread";
    case VerdictKind::undetermined: break;
  }
  return "undetermined";
}

std::string_view cause_class_name(CauseClass c) {
  switch (c) {
    case CauseClass::compute: return "compute";
    case CauseClass::host: return "host";
    case CauseClass::communication: return "communication";
    case CauseClass::gpu: return "gpu";
    case CauseClass::memory: return "memory";
    case CauseClass::unknown: break;
  }
  return "unknown";
}

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t n = v.size();
  std::nth_element(v.begin(), v.begin() + n / 2, v.end());
  const double hi = v[n / 2];
  if (n % 2) return hi;
  return 0.5 * (hi + *std::max_element(v.begin(), v.begin() + n / 2));
}

bool is_wait(const TimelineSet& set, const TimelineOp& op) {
  if (op.kind == OpKind::sync) return true;
  return set.collectives_include_wait && (op.kind == OpKind::collective || op.kind == OpKind::p2p);
}

// Mean and paired t statistic of a per-point difference.
std::pair<double, double> mean_t(const std::vector<double>& d) {
  if (d.size() < 2) return {d.empty() ? 0 : d[0], 0};
  const double m = std::accumulate(d.begin(), d.end(), 0.0) / double(d.size());
  double ss = 0;
  for (double x : d) ss += (x - m) * (x - m);
  const double se = std::sqrt(ss / double(d.size() - 1) / double(d.size()));
  return {m, se > 0 ? m / se : (m > 0 ? 1e9 : 0)};
}

// The most frequent non-zero value (launches per fully watched step; partly watched steps count fewer).
double mode_nonzero(const std::vector<int>& v) {
  std::map<int, int> c;
  for (int x : v)
    if (x > 0) c[x]++;
  if (c.empty()) return 0;
  return std::max_element(c.begin(), c.end(), [](auto& a, auto& b) { return a.second < b.second; })->first;
}

// Whether the launch probes were attached during all of [a, b).
bool watched(const TimelineSet& set, int64_t a, int64_t b) {
  if (set.launches_watched.empty()) return true;
  auto it = std::upper_bound(set.launches_watched.begin(), set.launches_watched.end(), std::pair<int64_t, int64_t>{a, INT64_MAX});
  if (it == set.launches_watched.begin()) return false;
  --it;
  return it->first <= a && b <= it->second;
}

// Mean of (time, value) samples within [t0, t1); `none` when there are none.
double mean_within(const std::vector<std::pair<int64_t, double>>& v, int64_t t0, int64_t t1, double none) {
  double sum = 0;
  int c = 0;
  for (auto& [t, x] : v)
    if (t >= t0 && t < t1) {
      sum += x;
      ++c;
    }
  return c ? sum / c : none;
}

// Growth of a cumulative counter over [t0, t1] per step, from its samples inside the window (scaled up to the
// whole window when they cover less of it); -1 when fewer than two samples lie there.
double counter_per_step(const std::vector<std::pair<int64_t, double>>& v, int64_t t0, int64_t t1, double steps) {
  auto a = std::lower_bound(v.begin(), v.end(), std::pair<int64_t, double>{t0, -1e300});
  auto b = std::upper_bound(v.begin(), v.end(), std::pair<int64_t, double>{t1, 1e300});
  if (b - a < 2) return -1;
  --b;
  const double covered = double(b->first - a->first);
  if (covered <= 0) return -1;
  return std::max(0.0, b->second - a->second) * (double(t1 - t0) / covered) / steps;
}

// CPU contention on one rank's cores, from the kernel's scheduler counters: its threads waited for a CPU
// (run queue) for a larger share of their CPU time than every other rank's. On a loaded host every rank waits;
// a rank that computes more also waits more, in proportion; a rank sharing its CPU with another busy process
// waits out of proportion. excess_ns: its run-queue wait per step beyond what the others' wait per CPU time
// would give its own CPU time.
struct CpuContention {
  bool stands_out = false;
  double excess_ns = 0, ratio = 0, others_ratio = 0;
};

CpuContention cpu_contention(const std::vector<WorkerLateness>& pw, int w, const VerdictOptions& opt) {
  CpuContention c;
  if (pw[w].runq_ns < 0 || pw[w].oncpu_ns <= 0) return c;
  for (size_t o = 0; o < pw.size(); ++o) {
    if (static_cast<int>(o) == w) continue;
    if (pw[o].runq_ns < 0 || pw[o].oncpu_ns <= 0) return c;
    c.others_ratio = std::max(c.others_ratio, pw[o].runq_ns / pw[o].oncpu_ns);
  }
  c.ratio = pw[w].runq_ns / pw[w].oncpu_ns;
  c.excess_ns = pw[w].runq_ns - pw[w].oncpu_ns * c.others_ratio;
  c.stands_out = c.ratio >= opt.contention_ratio * c.others_ratio && c.excess_ns >= opt.min_late_ns;
  return c;
}

// "; other processes busy on its host: python3 pid 850 (0.9 CPUs), ..." (the host layer's busiest processes).
std::string busy_others_text(const WorkerTimeline& w) {
  if (w.host_others_busy.empty()) return "";
  std::string s = "; processes on its host that are not ranks: ";
  char buf[160];
  for (size_t i = 0; i < w.host_others_busy.size() && i < 3; ++i) {
    std::snprintf(buf, sizeof buf, "%s%s (%.2f CPUs)", i ? ", " : "", w.host_others_busy[i].first.c_str(),
                  w.host_others_busy[i].second);
    s += buf;
  }
  return s;
}

std::string contention_text(const CpuContention& c, const WorkerLateness& pw) {
  char buf[400];
  std::snprintf(buf, sizeof buf, "CPU contention: its threads waited %.2f ms per step for a CPU (run queue), %.2f per ms "
                "on a CPU against at most %.2f on the other ranks: %.2f ms per step more than its CPU time explains",
                pw.runq_ns / 1e6, c.ratio, c.others_ratio, c.excess_ns / 1e6);
  return buf;
}

// Fewer watched intervals between syncs than this say too little to compare ranks by.
constexpr size_t kMinSyncIntervals = 10;

// Kernel launches between a worker's own CUDA synchronisations, in the intervals its launch probes watched whole:
// the host issues a step's launches in program order between its syncs, so each interval holds exactly its share
// of the work, where the points that cut the steps (when the collectives completed) fall at varying offsets from a
// host that runs ahead of its GPU. Syncs with no launch between them (an event sync right before a stream sync)
// close one interval. Empty when the worker made no such syncs.
std::vector<int> launches_between_syncs(const TimelineSet& set, const WorkerTimeline& wt, int64_t t0, int64_t t1) {
  std::vector<int64_t> syncs;
  for (auto& op : wt.ops)
    if (op.kind == OpKind::sync && op.start_ns >= t0 && op.start_ns < t1 &&
        set.names[op.name].find(" (") == std::string::npos)
      syncs.push_back(op.start_ns);
  std::sort(syncs.begin(), syncs.end());
  std::vector<int> out;
  const auto& l = wt.gpu_launch_ns;
  size_t from = 0;  // the sync that opened the interval
  for (size_t k = 1; k < syncs.size(); ++k) {
    const auto c = std::lower_bound(l.begin(), l.end(), syncs[k]) - std::lower_bound(l.begin(), l.end(), syncs[from]);
    if (c == 0) continue;
    if (watched(set, syncs[from], syncs[k])) out.push_back(static_cast<int>(c));
    from = k;
  }
  return out;
}

// Extra work on worker `a` from the launches between syncs (launches_between_syncs), against each of `others`:
// its intervals' quantiles (5 % to 95 %) at least as high as the other's, higher at a quarter of them or more, and
// its trimmed mean higher by 1 % and a quarter launch. Quantiles, not one median: where a step syncs at two places,
// the extra launch falls in one kind of interval only, and the median may be the other kind's.
bool launches_more_between_syncs(const std::vector<std::vector<int>>& between, int a, const std::vector<int>& others) {
  constexpr int kQ = 19;
  auto profile = [](std::vector<int> x) {
    std::sort(x.begin(), x.end());
    std::vector<double> q(kQ);
    for (int i = 0; i < kQ; ++i) q[static_cast<size_t>(i)] = x[static_cast<size_t>((i + 1) * (x.size() - 1) / (kQ + 1))];
    return q;
  };
  auto mean = [](const std::vector<double>& q) { return std::accumulate(q.begin(), q.end(), 0.0) / double(q.size()); };
  if (others.empty() || between[a].size() < kMinSyncIntervals) return false;
  const auto qa = profile(between[a]);
  for (int b : others) {
    if (between[b].size() < kMinSyncIntervals) return false;
    const auto qb = profile(between[b]);
    int more = 0, fewer = 0;
    for (int i = 0; i < kQ; ++i) {
      more += qa[static_cast<size_t>(i)] > qb[static_cast<size_t>(i)];
      fewer += qa[static_cast<size_t>(i)] < qb[static_cast<size_t>(i)];
    }
    const double ma = mean(qa), mb = mean(qb);
    if (fewer > 1 || 4 * more < kQ || ma < std::max(mb + 0.25, 1.01 * mb)) return false;
  }
  return true;
}

// Steps differ in launches (a flag all-reduced every few steps, cuDNN's choices): extra work on worker `a` must
// show in the steps watched whole on both, against every one of `others`: its median launches per step at least
// one (and 1 %) above theirs, and more steps where it launched more than fewer. Medians, not step-by-step
// comparisons: a rank whose host runs ahead of its GPU issues its launches at varying offsets from the points
// that cut the steps, so its count per step scatters both ways (44 +- 8 in tests/data/stragglers/h200x2_compute_rank1,
// while the rank doing extra work counts 45 in most steps); a step-by-step rule failed 9 of 10 such runs.
bool launches_more_per_step(const std::vector<std::vector<int>>& launches_in, int a, const std::vector<int>& others) {
  if (others.empty()) return false;
  for (int b : others) {
    std::vector<double> xa, xb;
    int more = 0, fewer = 0;
    for (size_t k = 0; k < launches_in[a].size() && k < launches_in[b].size(); ++k)
      if (launches_in[a][k] >= 0 && launches_in[b][k] > 0) {
        xa.push_back(launches_in[a][k]);
        xb.push_back(launches_in[b][k]);
        more += launches_in[a][k] > launches_in[b][k];
        fewer += launches_in[a][k] < launches_in[b][k];
      }
    if (xa.size() < 10 || more <= fewer) return false;
    const double ma = median(xa), mb = median(xb);
    if (ma < std::max(mb + 1, 1.01 * mb)) return false;
  }
  return true;
}

// A rank that NVML alone tells apart: its GPU shared with another busy process (contention) or throttling
// (both class gpu), or its own process keeping its GPU busier than every other rank's (compute: longer GPU
// work, seen whether or not its launches were watched). worker -1 when no rank stands out.
struct GpuSideCause {
  int worker = -1;
  CauseClass cause = CauseClass::unknown;
  std::string detail;
};

GpuSideCause gpu_side_cause(const TimelineSet& set, const std::vector<WorkerLateness>& pw, const VerdictOptions& opt) {
  GpuSideCause out;
  const size_t n = pw.size();
  if (n < 2) return out;
  auto top_two = [&](auto field) {
    std::vector<int> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return pw[a].*field > pw[b].*field; });
    return order;
  };
  char buf[400];
  const auto& gpu_name = [&](int w) { return set.workers[w].gpu.empty() ? std::string("its GPU") : set.workers[w].gpu; };
  // Contention: another process busy on its GPU and on no other rank's.
  auto o = top_two(&WorkerLateness::others_sm_util);
  if (pw[o[0]].others_sm_util >= 0.05 && pw[o[1]].others_sm_util <= 0.01) {
    out.worker = o[0];
    out.cause = CauseClass::gpu;
    std::snprintf(buf, sizeof buf, "GPU contention: another process (%s) kept %s's SMs %.0f %% busy for %.1f s, none "
                  "on the other ranks' GPUs", set.workers[o[0]].gpu_others.c_str(), gpu_name(o[0]).c_str(),
                  100 * pw[o[0]].others_sm_util, pw[o[0]].others_busy_ns / 1e9);
    out.detail = buf;
    return out;
  }
  // Contention that NVML's per-process samples stopped showing: a process seen computing on its GPU (on no other
  // rank's) stays listed there through most of the steps, and its GPU's SMs read busier than every other rank's.
  // NVML gives a time-sliced GPU's per-process samples to one process at a time: in the H200 x4 recording
  // h200x4_gpu_rank3 the co-tenant's samples (99 % busy) stop 0.2 s before the steps' first point, and from then on
  // the rank's own read 99 % against 80-84 % on the others, while the co-tenant stays listed until the rank ends it.
  auto c = top_two(&WorkerLateness::others_listed);
  if (pw[c[0]].others_listed >= 0.5 && pw[c[1]].others_listed == 0 && pw[c[0]].sm_util >= 0) {
    double next_util = -1;
    for (size_t w = 0; w < n; ++w)
      if (static_cast<int>(w) != c[0]) next_util = std::max(next_util, pw[w].sm_util);
    if (pw[c[0]].sm_util > next_util) {
      out.worker = c[0];
      out.cause = CauseClass::gpu;
      std::snprintf(buf, sizeof buf, "GPU contention: another process (%s), seen computing on %s (SMs %.0f %% busy in "
                    "NVML's samples of it), listed there through %.0f %% of the steps, none on the other ranks' GPUs; "
                    "its SMs %.0f %% busy against at most %.0f %% on the other ranks",
                    set.workers[c[0]].gpu_others.empty() ? "not a rank" : set.workers[c[0]].gpu_others.c_str(),
                    gpu_name(c[0]).c_str(), 100 * set.workers[c[0]].gpu_others_util, 100 * pw[c[0]].others_listed,
                    100 * pw[c[0]].sm_util, 100 * next_util);
      out.detail = buf;
      return out;
    }
  }
  // Throttling reported by its GPU far more often than by the others.
  auto t = top_two(&WorkerLateness::throttled);
  if (pw[t[0]].throttled >= 0.2 && pw[t[0]].throttled >= pw[t[1]].throttled + 0.2) {
    out.worker = t[0];
    out.cause = CauseClass::gpu;
    std::snprintf(buf, sizeof buf, "GPU throttling: %s reported a thermal, power or hardware slowdown in %.0f %% of "
                  "NVML's samples, the other ranks' GPUs in at most %.0f %%", gpu_name(t[0]).c_str(),
                  100 * pw[t[0]].throttled, 100 * pw[t[1]].throttled);
    out.detail = buf;
    return out;
  }
  // Memory: its caching allocator going to the driver step after step (growing, or freeing its cache and
  // retrying when the GPU is nearly full), far more often than on the others.
  auto a = top_two(&WorkerLateness::allocs);
  if (pw[a[0]].allocs >= 0.5 && pw[a[0]].allocs >= 3 * pw[a[1]].allocs + 0.25) {
    out.worker = a[0];
    out.cause = CauseClass::memory;
    std::snprintf(buf, sizeof buf, "GPU memory: %.1f cudaMalloc / cudaFree calls per step against at most %.1f on the "
                  "other ranks (the caching allocator growing or emptying itself)%s", pw[a[0]].allocs, pw[a[1]].allocs,
                  pw[a[0]].gpu_mem_used >= 0 ? (", its GPU's memory up to " +
                                                std::to_string(static_cast<int>(std::lround(100 * pw[a[0]].gpu_mem_used))) + " % in use").c_str() : "");
    out.detail = buf;
    return out;
  }
  // Link: its host retransmitting TCP segments (NCCL or gloo over sockets) far more than the other ranks' hosts.
  // Ranks on one host share its counter: nobody stands out there.
  auto l = top_two(&WorkerLateness::retransmits_per_s);
  if (pw[l[0]].retransmits_per_s >= 10 && pw[l[0]].retransmits_per_s >= 5 * pw[l[1]].retransmits_per_s) {
    out.worker = l[0];
    out.cause = CauseClass::communication;
    std::snprintf(buf, sizeof buf, "the link: its host (%s) retransmitted %.0f TCP segments per second, the other ranks' "
                  "hosts at most %.0f", set.workers[l[0]].host.c_str(), pw[l[0]].retransmits_per_s, pw[l[1]].retransmits_per_s);
    out.detail = buf;
    return out;
  }
  // A starved GPU: its process's SM utilisation far below every other rank's, which agree among themselves. In a
  // job whose GPUs wait for each other in collective kernels, a waiting GPU counts as busy (NCCL's kernels spin
  // on the SMs), so the rank whose GPU idles is the one whose host did not feed it: on H200 runs with a spinner
  // sharing one rank's CPUs it was 0.34-0.51 against 0.71-0.95 in all 10 runs, while its host
  // was not measurably late at the collectives (the GPUs, not the hosts, queue there). The same figure read
  // the other way ("SMs busiest = longer GPU work") named the waiting rank: removed.
  // The gap must be wide (0.2) unless its threads also waited for a CPU out of proportion (two signals agreeing):
  // in the H200 x4 recording h200x4_cpu_rank3 every rank's GPU idles more (each rank pinned to one loaded CPU), the
  // spinner's rank at 22 % against 38-42 %, its threads waiting 1.33 ms for a CPU per ms on one against at most 0.34.
  auto u = top_two(&WorkerLateness::sm_util);
  const int low = u.back(), next = u[n - 2];
  const bool wide = pw[next].sm_util >= pw[low].sm_util + 0.2;
  if (pw[low].sm_util >= 0 && (wide || cpu_contention(pw, low, opt).stands_out) &&
      pw[low].sm_util <= 0.67 * pw[next].sm_util && pw[u[0]].sm_util - pw[next].sm_util <= 0.2) {
    out.worker = low;
    out.cause = CauseClass::host;
    double runq_others = 0;
    for (size_t w = 0; w < n; ++w)
      if (static_cast<int>(w) != low) runq_others = std::max(runq_others, pw[w].runq_ns);
    std::string why = "its host fed it late";
    if (pw[low].runq_ns > 0 && pw[low].runq_ns >= 1.2 * runq_others) {
      std::snprintf(buf, sizeof buf, "CPU contention: its threads waited %.2f ms per step for a CPU against at most %.2f "
                    "on the other ranks", pw[low].runq_ns / 1e6, runq_others / 1e6);
      why = buf;
    }
    std::snprintf(buf, sizeof buf, "a starved GPU: its process kept %s's SMs %.0f %% busy against at least %.0f %% on "
                  "the other ranks, whose GPUs waited for it in collectives; %s", gpu_name(low).c_str(),
                  100 * pw[low].sm_util, 100 * pw[next].sm_util, why.c_str());
    out.detail = buf;
  }
  return out;
}

}  // namespace

void promote_coincident_blocks(TimelineSet& set, int64_t tolerance_ns) {
  std::vector<std::pair<int64_t, int>> ends;  // (end, worker) of every block
  for (size_t w = 0; w < set.workers.size(); ++w)
    for (auto& op : set.workers[w].ops)
      if (op.kind == OpKind::offcpu || is_wait(set, op)) ends.emplace_back(op.end_ns(), static_cast<int>(w));
  std::sort(ends.begin(), ends.end());
  for (size_t w = 0; w < set.workers.size(); ++w)
    for (auto& op : set.workers[w].ops) {
      if (op.kind != OpKind::offcpu) continue;
      auto it = std::lower_bound(ends.begin(), ends.end(), std::pair<int64_t, int>{op.end_ns() - tolerance_ns, -1});
      for (; it != ends.end() && it->first <= op.end_ns() + tolerance_ns; ++it)
        if (it->second != static_cast<int>(w)) {
          op.kind = OpKind::sync;
          break;
        }
    }
}

SyncPoints find_sync_points(const TimelineSet& set) {
  SyncPoints sp;
  const size_t n = set.workers.size();
  struct End {
    int64_t t;
    int worker;
    int64_t dur;
    uint32_t name;
    int32_t step;
  };
  std::vector<End> ends;
  std::vector<std::pair<int64_t, double>> gaps;  // (end, time since the same worker's previous wait ended)
  for (size_t w = 0; w < n; ++w) {
    int64_t prev = INT64_MIN;
    for (auto& op : set.workers[w].ops) {
      if (!is_wait(set, op)) continue;
      ends.push_back({op.end_ns(), static_cast<int>(w), op.duration_ns, op.name, op.step});
      if (prev != INT64_MIN && op.end_ns() > prev) gaps.emplace_back(op.end_ns(), double(op.end_ns() - prev));
      prev = op.end_ns();
    }
  }
  if (ends.empty()) return sp;
  std::sort(ends.begin(), ends.end(), [](auto& a, auto& b) { return a.t < b.t; });
  // Active spans: a point before a worker's first or after its last operation says nothing about it.
  std::vector<int64_t> lo(n, INT64_MAX), hi(n, INT64_MIN);
  for (size_t w = 0; w < n; ++w) {
    for (auto& op : set.workers[w].ops) {
      lo[w] = std::min(lo[w], op.start_ns);
      hi[w] = std::max(hi[w], op.end_ns());
    }
    for (auto& op : set.workers[w].cpu_samples) {
      lo[w] = std::min(lo[w], op.start_ns);
      hi[w] = std::max(hi[w], op.end_ns());
    }
  }
  // Waits of one point end together, within the time it takes to wake each thread (milliseconds on a loaded
  // host: a thread's block ends when it is back on a CPU); successive points are a step or a bucket apart. A
  // worker waits once per point: its next wait opens the next point. The tolerance is a share of the usual gap
  // in the training loop's steady state: first over every wait, then, once the steady state is known, over the
  // waits there alone (hundreds of start-up waits a few ms apart, two ranks importing together, made it 1 ms
  // and split the steps' points in two where a rank waited for a CPU after its wait).
  double tol = 0;
  std::vector<std::vector<int64_t>> waits;
  std::vector<std::map<uint32_t, int>> names;
  std::vector<std::map<int32_t, int>> steps_of;
  std::vector<int64_t> first;
  std::map<uint32_t, int> name_points;
  std::vector<uint32_t> point_name;
  int64_t steady_lo = INT64_MIN, steady_hi = INT64_MAX;
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<double> g;
    for (auto& [t, gap] : gaps)
      if (t - static_cast<int64_t>(gap) >= steady_lo && t <= steady_hi) g.push_back(gap);
    const double t_pass = std::max(20'000.0, 0.4 * median(g));
    if (pass > 0 && (g.size() < 4 || std::abs(t_pass - tol) <= 0.1 * tol)) break;
    tol = t_pass;
    waits.clear();
    names.clear();
    steps_of.clear();
    first.clear();
    for (auto& e : ends) {
      if (first.empty() || double(e.t - first.back()) > tol || waits.back()[e.worker] > 0) {
        first.push_back(e.t);
        waits.emplace_back(n, 0);
        names.emplace_back();
        steps_of.emplace_back();
      }
      waits.back()[e.worker] += e.dur;
      names.back()[e.name]++;
      steps_of.back()[e.step]++;
    }
    name_points.clear();
    point_name.assign(first.size(), 0);
    for (size_t k = 0; k < first.size(); ++k) {
      point_name[k] = std::max_element(names[k].begin(), names[k].end(), [](auto& a, auto& b) { return a.second < b.second; })->first;
      name_points[point_name[k]]++;
    }
    // The training loop's steady state: from the first to the last point of the kind that lasts longest among
    // the frequent ones (start-up waits such as imports, rendezvous and DDP's first broadcast come before it, the
    // final barrier after it). Not the most frequent kind: two ranks importing torch together block in the same
    // file reads, ending together, hundreds of times in a second (179 such points against 100 steps on a gloo run).
    std::map<uint32_t, std::pair<int64_t, int64_t>> name_span;
    for (size_t k = 0; k < first.size(); ++k) {
      auto [it, fresh] = name_span.try_emplace(point_name[k], first[k], first[k]);
      it->second.first = std::min(it->second.first, first[k]);
      it->second.second = std::max(it->second.second, first[k]);
    }
    uint32_t dominant =
        std::max_element(name_points.begin(), name_points.end(), [](auto& a, auto& b) { return a.second < b.second; })->first;
    int64_t longest = -1;
    for (auto& [name, count] : name_points) {
      const int64_t span = name_span[name].second - name_span[name].first;
      if (count * 10 >= static_cast<int>(first.size()) && span > longest) {
        longest = span;
        dominant = name;
      }
    }
    steady_lo = name_span[dominant].first;
    steady_hi = name_span[dominant].second;
  }
  for (size_t k = 0; k < first.size(); ++k) {
    if (name_points[point_name[k]] * 10 < static_cast<int>(first.size())) continue;  // rare: not part of a step
    if (first[k] < steady_lo || first[k] > steady_hi) continue;
    bool inside = true;
    for (size_t w = 0; w < n; ++w) inside &= first[k] > lo[w] && first[k] <= hi[w] + static_cast<int64_t>(tol);
    if (!inside) continue;
    sp.end_ns.push_back(first[k]);
    sp.wait_ns.push_back(std::move(waits[k]));
    sp.name.push_back(point_name[k]);
    sp.step.push_back(std::max_element(steps_of[k].begin(), steps_of[k].end(),
                                       [](auto& a, auto& b) { return a.second < b.second; })->first);
  }
  // Points per step: the period of the sequence of point names (DDP with several buckets waits more than once).
  std::vector<uint64_t> seq(sp.name.begin(), sp.name.end());
  const int p = seq.size() >= 4 ? sequence_period(seq, std::min<int>(64, static_cast<int>(seq.size() / 2)), 0.9) : 1;
  sp.period = std::max(1, p);
  sp.steps = static_cast<int>(sp.end_ns.size()) / sp.period;
  // A balanced step can pass with every rank's wait under the recorder's off-CPU threshold (0.2 ms): no point.
  // A gap of close to a whole multiple (2x, 3x...) of the usual step counts that many steps; other long gaps
  // (a stall) count one.
  for (size_t k = sp.period - 1; k < sp.end_ns.size(); k += sp.period) sp.step_ends.push_back(sp.end_ns[k]);
  if (sp.period == 1 && sp.end_ns.size() >= 3) {
    // Only where balanced steps happen at all: when at least 5 % of the points had every wait under 2 ms (10x the
    // threshold), some steps passed with none recorded. Where one rank always waits long (a straggler), a long
    // gap is a stall, not a step nobody saw.
    int balanced = 0;
    for (auto& w : sp.wait_ns) balanced += *std::max_element(w.begin(), w.end()) < 2'000'000;
    std::vector<double> g;
    for (size_t k = 1; k < sp.end_ns.size(); ++k) g.push_back(double(sp.end_ns[k] - sp.end_ns[k - 1]));
    const double med = median(g);
    // The step's length drifts with the host's load (0.9x to 1.3x the run's median on the loaded VM), so each
    // gap is weighed against the single-step gaps nearest to it, not the run's median.
    std::vector<size_t> singles;
    for (size_t i = 0; i < g.size(); ++i)
      if (g[i] < 1.5 * med) singles.push_back(i);
    std::vector<int64_t> ends{sp.end_ns.front()};
    for (size_t i = 0; i < g.size(); ++i) {
      // A point under 0.3 of a step after the previous one is a second wait of the same step (a rank waiting for
      // a CPU woke after the others' point; 12 ms after it in a 79 ms step on the loaded VM): no step computes
      // that fast. The step ends at the later one.
      if (g[i] < 0.3 * med) {
        ends.back() = sp.end_ns[i + 1];
        continue;
      }
      int whole = 1;
      // Only after two single steps: a loop's first steps run longer (allocator, caches, autotuning warming up;
      // 1.5x the next ones on the gloo runs), and against the faster steps after them they looked like two.
      auto at = std::lower_bound(singles.begin(), singles.end(), i);
      if (balanced * 20 >= static_cast<int>(sp.end_ns.size()) && g[i] >= 1.5 * med && at - singles.begin() >= 2) {
        auto left = at, right = at;  // the 8 single-step gaps nearest to gap i: [left, right)
        while (right - left < 8 && (left != singles.begin() || right != singles.end())) {
          if (left == singles.begin()) ++right;
          else if (right == singles.end()) --left;
          else if (i - *(left - 1) <= *right - i) --left;
          else ++right;
        }
        std::vector<double> near;
        for (auto it = left; it != right; ++it) near.push_back(g[*it]);
        const double r = g[i] / median(near);
        const double rounded = std::round(r);
        if (rounded >= 2 && std::abs(r - rounded) <= 0.3) whole = static_cast<int>(rounded);
      }
      for (int s = 1; s < whole; ++s)  // the ends of the steps nobody waited in, evenly spaced
        ends.push_back(sp.end_ns[i] + static_cast<int64_t>(g[i] * s / whole));
      ends.push_back(sp.end_ns[i + 1]);
    }
    sp.step_ends = std::move(ends);
    sp.steps = static_cast<int>(sp.step_ends.size());
  }
  return sp;
}

SyncPoints points_per_step(const SyncPoints& sp) {
  // By step number, not by runs of it: a background thread's long wait (a loader's Condition.wait) ends in a
  // later step than the one it is numbered with.
  std::map<int32_t, size_t> unit;
  SyncPoints out;
  for (size_t k = 0; k < sp.end_ns.size(); ++k) {
    const int32_t step = k < sp.step.size() ? sp.step[k] : -1;
    if (step < 0) continue;
    auto [it, fresh] = unit.try_emplace(step, out.end_ns.size());
    if (fresh) {
      out.end_ns.push_back(sp.end_ns[k]);
      out.wait_ns.push_back(sp.wait_ns[k]);
      out.name.push_back(sp.name[k]);
      out.step.push_back(step);
      continue;
    }
    out.end_ns[it->second] = std::max(out.end_ns[it->second], sp.end_ns[k]);
    for (size_t w = 0; w < sp.wait_ns[k].size(); ++w) out.wait_ns[it->second][w] += sp.wait_ns[k][w];
  }
  if (out.end_ns.size() < 5) return {};
  SyncPoints sorted;  // in step order
  for (auto& [step, i] : unit) {
    sorted.end_ns.push_back(out.end_ns[i]);
    sorted.wait_ns.push_back(std::move(out.wait_ns[i]));
    sorted.name.push_back(out.name[i]);
    sorted.step.push_back(step);
  }
  sorted.period = 1;
  sorted.steps = static_cast<int>(sorted.end_ns.size());
  return sorted;
}

StragglerVerdict wait_verdict(const TimelineSet& set, const SyncPoints& sp, const VerdictOptions& opt) {
  StragglerVerdict v;
  const size_t n = set.workers.size();
  const size_t m = sp.end_ns.size();
  v.per_worker.resize(n);
  v.points = static_cast<int>(m);
  if (n < 2 || m < 5) {
    v.evidence = m < 5 ? "too few synchronisation points seen (" + std::to_string(m) +
                             "): nothing tells who waited for whom"
                       : "one worker: nobody to compare with";
    return v;
  }
  std::vector<double> step_gaps;
  for (size_t k = sp.period; k < m; k += sp.period) step_gaps.push_back(double(sp.end_ns[k] - sp.end_ns[k - sp.period]));
  v.step_ns = median(step_gaps);
  v.recorded_ns = double(sp.end_ns.back() - sp.end_ns.front());
  // late[k][w]: how much later than the earliest rank w arrived at point k.
  std::vector<std::vector<double>> late(m, std::vector<double>(n));
  for (size_t k = 0; k < m; ++k) {
    const int64_t mx = *std::max_element(sp.wait_ns[k].begin(), sp.wait_ns[k].end());
    for (size_t w = 0; w < n; ++w) {
      late[k][w] = double(mx - sp.wait_ns[k][w]);
      v.per_worker[w].late_ns += late[k][w] / double(m);
      v.per_worker[w].wait_ns += double(sp.wait_ns[k][w]) / double(m);
    }
    const int64_t mn = *std::min_element(sp.wait_ns[k].begin(), sp.wait_ns[k].end());
    for (size_t w = 0; w < n; ++w)
      if (sp.wait_ns[k][w] == mn) v.per_worker[w].last_share += 1.0 / double(m);
  }
  // What each worker did between the first and the last point, per step: on-CPU, blocked elsewhere, launches.
  const int64_t t0 = sp.end_ns.front(), t1 = sp.end_ns.back();
  const double steps = std::max(1.0, double(m - 1) / sp.period);
  std::vector<std::vector<int>> launches_in(n);  // [worker][step] launches in each watched step, -1 unwatched
  std::vector<std::vector<int>> between_syncs(n);  // [worker] launches in each watched interval between its syncs
  for (size_t w = 0; w < n; ++w) {
    auto& pw = v.per_worker[w];
    for (auto& s : set.workers[w].cpu_samples)
      if (s.start_ns >= t0 && s.start_ns < t1) pw.cpu_ns += double(s.duration_ns) / steps;
    for (auto& op : set.workers[w].ops)
      if (op.kind == OpKind::offcpu && op.start_ns >= t0 && op.start_ns < t1) pw.offcpu_ns += double(op.duration_ns) / steps;
    const auto& l = set.workers[w].gpu_launch_ns;
    if (!l.empty()) {
      // Only steps whose launches were watched from start to end: a cost budget attaches the launch probes
      // for part of each period, and a step cut by a window's edge counts fewer.
      std::vector<int> per_step;
      size_t i = std::lower_bound(l.begin(), l.end(), t0) - l.begin();
      for (size_t k = sp.period; k < m; k += sp.period) {
        int c = 0;
        for (; i < l.size() && l[i] < sp.end_ns[k]; ++i) ++c;
        const bool seen = watched(set, sp.end_ns[k - sp.period], sp.end_ns[k]);
        if (seen) per_step.push_back(c);
        launches_in[w].push_back(seen ? c : -1);
      }
      pw.launch_steps = static_cast<int>(per_step.size());
      pw.launches = mode_nonzero(per_step);
      between_syncs[w] = launches_between_syncs(set, set.workers[w], t0, t1);
    }
    const auto& wt = set.workers[w];
    pw.sm_util = wt.gpu_sm_util.empty() ? -1 : mean_within(wt.gpu_sm_util, t0, t1, -1);
    pw.others_sm_util = mean_within(wt.gpu_others_sm_util, t0, t1, 0);
    int64_t busy_from = INT64_MAX, busy_to = INT64_MIN;
    for (auto& [t, x] : wt.gpu_others_sm_util)
      if (t >= t0 && t < t1 && x > 0) {
        busy_from = std::min(busy_from, t);
        busy_to = std::max(busy_to, t);
      }
    pw.others_busy_ns = busy_to > busy_from ? double(busy_to - busy_from) : 0;
    double listed = 0;  // the union of the co-tenants' listed spans within [t0, t1] (spans sorted by start)
    int64_t covered_to = t0;
    for (auto& [a, b] : wt.gpu_others_spans) {
      const int64_t lo = std::max(a, covered_to), hi = std::min(b, t1);
      if (hi > lo) {
        listed += double(hi - lo);
        covered_to = hi;
      }
    }
    pw.others_listed = t1 > t0 ? listed / double(t1 - t0) : 0;
    pw.throttled = mean_within(wt.gpu_throttled, t0, t1, 0);
    for (auto& [t, x] : wt.gpu_mem_used)
      if (t >= t0 && t < t1) pw.gpu_mem_used = std::max(pw.gpu_mem_used, x);
    pw.allocs = double(std::lower_bound(wt.gpu_alloc_ns.begin(), wt.gpu_alloc_ns.end(), t1) -
                       std::lower_bound(wt.gpu_alloc_ns.begin(), wt.gpu_alloc_ns.end(), t0)) / steps;
    double r0 = -1, r1 = -1;
    int64_t s0 = 0, s1 = 0;
    for (auto& [t, x] : wt.tcp_retransmits)
      if (t >= t0 && t < t1) {
        if (r0 < 0) {
          r0 = x;
          s0 = t;
        }
        r1 = x;
        s1 = t;
      }
    if (s1 > s0) pw.retransmits_per_s = std::max(0.0, r1 - r0) / (double(s1 - s0) / 1e9);
    if (wt.host_cpus > 0) pw.runnable_per_cpu = mean_within(wt.host_runnable, t0, t1, 0) / wt.host_cpus;
    pw.runq_ns = counter_per_step(wt.runq_wait_ns, t0, t1, steps);
    pw.oncpu_ns = counter_per_step(wt.oncpu_ns, t0, t1, steps);
  }
  // Rank workers by mean lateness; the widest gap in that order splits the late set from the rest.
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return v.per_worker[a].late_ns > v.per_worker[b].late_ns; });
  const double range = v.per_worker[order.front()].late_ns - v.per_worker[order.back()].late_ns;
  size_t split = 1;
  double gap = 0;
  for (size_t i = 0; i + 1 < n; ++i) {
    const double g = v.per_worker[order[i]].late_ns - v.per_worker[order[i + 1]].late_ns;
    if (g > gap) {
      gap = g;
      split = i + 1;
    }
  }
  std::vector<int> slow(order.begin(), order.begin() + split), rest(order.begin() + split, order.end());
  // Per point: the late set's mean lateness minus the rest's. Its mean is what each point cost the job, its
  // paired t whether that is more than noise. Each point's excess is bounded by the time since the previous.
  std::vector<double> diff(m);
  for (size_t k = 0; k < m; ++k) {
    double a = 0, b = 0;
    for (int w : slow) a += late[k][w] / double(slow.size());
    for (int w : rest) b += late[k][w] / double(rest.size());
    diff[k] = a - b;
    // Points out of time order (no step markers to order them) bound the excess by no time, not a negative one.
    const double bound = k ? std::max(0.0, double(sp.end_ns[k] - sp.end_ns[k - 1])) : 0;
    v.excess_ns += std::clamp(diff[k], 0.0, bound);
  }
  const auto [mean_diff, t] = mean_t(diff);
  const double threshold = std::max(opt.min_late_ns, opt.min_share_of_step * v.step_ns / sp.period);
  double consistent = 0;  // share of points where every slow worker arrived after every other
  for (size_t k = 0; k < m; ++k) {
    double slow_min = 1e300, rest_max = -1e300;
    for (int w : slow) slow_min = std::min(slow_min, late[k][w]);
    for (int w : rest) rest_max = std::max(rest_max, late[k][w]);
    consistent += slow_min > rest_max ? 1.0 / double(m) : 0;
  }
  char buf[512];
  const bool significant = mean_diff >= threshold && t >= opt.min_t;
  // Where every worker synchronised often enough, the launches between its syncs decide whether one did extra GPU
  // work (exact); otherwise the launches per step between the points.
  const bool by_syncs = std::all_of(between_syncs.begin(), between_syncs.end(),
                                    [](auto& x) { return x.size() >= kMinSyncIntervals; });
  if (!significant) {
    v.kind = VerdictKind::none;
    v.excess_ns = 0;
    // Sure of "none" when the largest lateness is far below the threshold and the latest rank changes.
    const double ratio = std::min(1.0, std::max(0.0, mean_diff) / threshold);
    v.confidence = std::clamp(1.0 - 0.5 * ratio - 0.3 * std::max(0.0, consistent - 0.5), 0.3, 1.0);
    std::snprintf(buf, sizeof buf,
                  "no rank's host kept the others waiting: the latest arrivals were %.2f ms behind the rest per point "
                  "(threshold %.2f ms, t %.1f) over %zu points",
                  mean_diff / 1e6, threshold / 1e6, t, m);
    v.evidence = buf;
    // A latest rank whose threads waited for a CPU out of proportion is said, not named: on a shared host a
    // clean run's rank is late this way too (7-8 % of the step, t 4, 2.5x the other's run-queue wait per CPU
    // time on two clean gloo runs), as late as a rank sharing its CPU with a spinner on a loaded one.
    if (slow.size() == 1 && mean_diff >= opt.min_late_ns) {
      const CpuContention c = cpu_contention(v.per_worker, slow[0], opt);
      if (c.stands_out) {
        std::snprintf(buf, sizeof buf, "; the latest, %s, waited for a CPU %.2f per ms on one against at most %.2f on "
                      "the others (CPU contention, too little delay to name it)", set.workers[slow[0]].worker.c_str(),
                      c.ratio, c.others_ratio);
        v.evidence += buf;
      }
    }
    // A GPU job's hosts all wait for their GPUs, so a rank whose GPU does extra work is not late on the host;
    // it launches more kernels per step than its peers, which do the same work.
    auto per_sync = [&](int w) {  // the median interval's launches
      auto x = between_syncs[static_cast<size_t>(w)];
      if (x.empty()) return 0.0;
      std::nth_element(x.begin(), x.begin() + static_cast<long>(x.size() / 2), x.end());
      return double(x[x.size() / 2]);
    };
    std::vector<int> by_launch(n);
    std::iota(by_launch.begin(), by_launch.end(), 0);
    std::sort(by_launch.begin(), by_launch.end(), [&](int a, int b) {
      return by_syncs ? per_sync(a) > per_sync(b) : v.per_worker[a].launches > v.per_worker[b].launches;
    });
    const double top = v.per_worker[by_launch[0]].launches, second = v.per_worker[by_launch[1]].launches;
    const double lowest = v.per_worker[by_launch.back()].launches;
    const std::vector<int> others_of_top(by_launch.begin() + 1, by_launch.end());
    const bool more_per_step = by_syncs ? launches_more_between_syncs(between_syncs, by_launch[0], others_of_top)
                                        : launches_more_per_step(launches_in, by_launch[0], others_of_top) &&
                                              second > 0 && top >= std::max(second + 1, 1.01 * second) && second == lowest;
    const GpuSideCause gpu = gpu_side_cause(set, v.per_worker, opt);
    // One more launch in 440 is a different cuDNN algorithm (cudnn.benchmark chooses per rank: seen on the
    // H200 CNN recording), not extra work: the excess must be at least 1 % of the others' launches.
    if (more_per_step) {
      v.kind = VerdictKind::one_straggler;
      v.workers = {by_launch[0]};
      v.cause = CauseClass::compute;
      v.confidence = 0.6;  // more work, not a measured delay: its cost is not seen from the host
      v.excess_measured = false;
      if (by_syncs)
        std::snprintf(buf, sizeof buf, "extra GPU work: %.0f kernel launches between CUDA syncs (median) against at "
                      "most %.0f on every other rank", per_sync(by_launch[0]), per_sync(by_launch[1]));
      else
        std::snprintf(buf, sizeof buf, "extra GPU work: %.0f kernel launches per step against %.0f on every other rank",
                      top, second);
      v.cause_detail = buf;
      // Its GPU time is not recorded. What is: how long the others' hosts waited for their GPUs in CUDA syncs
      // (recorded all along), which holds the wait for its extra work when their hosts run ahead of their GPUs
      // (on the H200 recording 2.11 ms per step against a step 2.3 ms longer than a clean run's). Not a bound:
      // a host behind its GPU waits less than the delay.
      std::vector<double> others_sync;
      for (size_t w = 0; w < n; ++w) {
        if (static_cast<int>(w) == by_launch[0]) continue;
        double sync = 0;
        std::set<int32_t> labels;  // the steps numbered there (the sync points' own count is less sure)
        for (auto& op : set.workers[w].ops) {
          if (op.start_ns < t0 || op.start_ns >= t1) continue;
          if (op.step >= 0) labels.insert(op.step);
          if (op.kind == OpKind::sync && set.names[op.name].find(" (") == std::string::npos) sync += double(op.duration_ns);
        }
        others_sync.push_back(sync / (labels.empty() ? steps : double(labels.size())));
      }
      const double others_wait = median(others_sync);
      if (others_wait > 0) {
        std::snprintf(buf, sizeof buf, "the other ranks' hosts waited %.2f ms per step for their GPUs in CUDA syncs, "
                      "which includes the wait for it", others_wait / 1e6);
        // The cause itself is printed beside the evidence (cause_detail): said once, here only what bears on it.
        v.evidence += "; but its GPU did more work a step (the cause; its GPU time is not recorded: " + std::string(buf) + ")";
      } else {
        v.evidence += "; but its GPU did more work a step (the cause; its GPU time is not seen from the host)";
      }
    } else if (gpu.worker >= 0) {
      v.kind = VerdictKind::one_straggler;
      v.workers = {gpu.worker};
      v.cause = gpu.cause;
      v.cause_detail = gpu.detail;
      v.confidence = 0.5;  // seen by NVML on its GPU alone; the delay it caused is not measured from the host
      v.excess_measured = false;
      v.evidence += "; but what NVML saw on its GPU names it (the cause)";
    } else {
      // Every rank's host retransmitting: a slow link slows them alike (no straggler, but worth saying).
      double least = 1e300;
      for (auto& pw : v.per_worker) least = std::min(least, pw.retransmits_per_s);
      if (least >= 10) {
        std::snprintf(buf, sizeof buf, "; every rank's host retransmitted at least %.0f TCP segments per second (a slow "
                      "or lossy link slows all ranks alike)", least);
        v.evidence += buf;
      }
    }
  } else {
    // A clean split has one wide gap; graded lateness (every rank a little slow) has no dominant gap.
    const bool clean = gap >= 0.6 * range;
    if (!clean) {
      v.kind = VerdictKind::spread;
      v.workers = order;
    } else if (slow.size() == 1) {
      v.kind = VerdictKind::one_straggler;
      v.workers = slow;
    } else {
      v.kind = VerdictKind::slow_group;
      v.workers = slow;
    }
    v.confidence = std::clamp(consistent * std::min(1.0, t / (2 * opt.min_t)) * (clean ? 1.0 : 0.6), 0.0, 1.0);
    // Several ranks late, but only one of them spent extra time of its own (on the CPU or blocked) enough to
    // explain its lateness: that one is the straggler, the others' lateness follows from it (ranks sharing its
    // host's CPUs, or waiting for it in an earlier collective).
    std::string knock_on;
    if (v.kind != VerdictKind::one_straggler) {
      std::vector<double> cpus, offs;
      for (auto& pw : v.per_worker) {
        cpus.push_back(pw.cpu_ns);
        offs.push_back(pw.offcpu_ns);
      }
      const double cpu_med = median(cpus), off_med = median(offs);
      std::vector<int> explained;
      for (size_t w = 0; w < n; ++w) {
        const double own = std::max(v.per_worker[w].cpu_ns - cpu_med, v.per_worker[w].offcpu_ns - off_med);
        if (own >= threshold * sp.period && own >= 0.5 * v.per_worker[w].late_ns * sp.period)
          explained.push_back(static_cast<int>(w));
      }
      const bool late_half = explained.size() == 1 &&
                             std::find(order.begin(), order.begin() + (n + 1) / 2, explained[0]) != order.begin() + (n + 1) / 2;
      if (late_half) {
        v.kind = VerdictKind::one_straggler;
        v.workers = explained;
        slow = explained;
        rest.clear();
        for (size_t w = 0; w < n; ++w)
          if (static_cast<int>(w) != explained[0]) rest.push_back(static_cast<int>(w));
        v.confidence *= 0.8;
        knock_on = "; other ranks were late too but spent no extra time of their own (knock-on)";
      }
      // Graded lateness on the hosts, but one rank's GPU starved while the others' waited in collectives: that
      // rank held them up, the hosts' lateness is what their GPUs' queues passed on (H200 x4, a spinner on
      // rank 0's CPUs: "spread" with rank 0 latest, its SMs 35 % busy against 84-92 %).
      if (!late_half) {
        const GpuSideCause starved = gpu_side_cause(set, v.per_worker, opt);
        if (starved.worker >= 0 && starved.cause == CauseClass::host &&
            std::find(order.begin(), order.begin() + (n + 1) / 2, starved.worker) != order.begin() + (n + 1) / 2) {
          v.kind = VerdictKind::one_straggler;
          v.workers = {starved.worker};
          slow = v.workers;
          rest.clear();
          for (size_t w = 0; w < n; ++w)
            if (static_cast<int>(w) != starved.worker) rest.push_back(static_cast<int>(w));
          v.confidence *= 0.8;
          knock_on = "; other ranks were late too, their GPUs waiting for its starved one (knock-on)";
        }
      }
    }
    std::snprintf(buf, sizeof buf,
                  "the others waited %.2f ms per point for %s (t %.1f; last to arrive at %.0f %% of %zu points); "
                  "%.1f ms in all, %.1f %% of the %.1f s analysed",
                  mean_diff / 1e6, slow.size() == 1 ? "it" : "them", t, 100 * consistent, m, v.excess_ns / 1e6,
                  v.recorded_ns > 0 ? 100 * v.excess_ns / v.recorded_ns : 0.0, v.recorded_ns / 1e9);
    v.evidence = buf + knock_on;
    // Cause: what the late set did with the time the others spent waiting, per step against the rest.
    auto avg = [&](const std::vector<int>& ws, auto field) {
      double s = 0;
      for (int w : ws) s += v.per_worker[w].*field;
      return ws.empty() ? 0.0 : s / double(ws.size());
    };
    const double late_per_step = mean_diff * sp.period;
    const double d_cpu = avg(slow, &WorkerLateness::cpu_ns) - avg(rest, &WorkerLateness::cpu_ns);
    const double d_off = avg(slow, &WorkerLateness::offcpu_ns) - avg(rest, &WorkerLateness::offcpu_ns);
    const double l_slow = avg(slow, &WorkerLateness::launches), l_rest = avg(rest, &WorkerLateness::launches);
    const GpuSideCause gpu = gpu_side_cause(set, v.per_worker, opt);
    bool more_launches = by_syncs || (l_rest > 0 && l_slow >= std::max(l_rest + 1, 1.01 * l_rest));
    for (int w : slow)
      more_launches &= by_syncs ? launches_more_between_syncs(between_syncs, w, rest) : launches_more_per_step(launches_in, w, rest);
    if (more_launches) {
      v.cause = CauseClass::compute;
      std::snprintf(buf, sizeof buf, "extra GPU work: %.0f kernel launches per step against %.0f on the others",
                    l_slow, l_rest);
    } else if (slow.size() == 1 && gpu.worker == slow[0] && gpu.cause != CauseClass::compute) {
      v.cause = gpu.cause;
      std::snprintf(buf, sizeof buf, "%s", gpu.detail.c_str());
    } else if (d_off >= 0.3 * late_per_step && d_off >= d_cpu) {
      v.cause = CauseClass::host;
      std::snprintf(buf, sizeof buf, "the host: blocked outside any collective %.2f ms per step longer than the others "
                    "(late step start: sleep, data loading, I/O)", d_off / 1e6);
    } else if (const CpuContention c = slow.size() == 1 ? cpu_contention(v.per_worker, slow[0], opt) : CpuContention{};
               c.stands_out && c.excess_ns >= 0.3 * late_per_step && c.excess_ns >= d_cpu) {
      // More CPU time also means more waiting for a CPU on a loaded host, in proportion: only the wait beyond
      // that proportion is contention, and it must explain more of the lateness than extra CPU time does.
      v.cause = CauseClass::host;
      std::snprintf(buf, sizeof buf, "%s%s", contention_text(c, v.per_worker[slow[0]]).c_str(),
                    busy_others_text(set.workers[slow[0]]).c_str());
    } else if (d_cpu >= 0.3 * late_per_step) {
      v.cause = CauseClass::compute;
      std::snprintf(buf, sizeof buf, "compute: %.2f ms per step more on the CPU than the others", d_cpu / 1e6);
    } else {
      // Late on the host with no more CPU time and no longer blocks: its threads were runnable but not running
      // (other processes on its CPUs), or blocked in waits under the recorder's 0.2 ms. Not a GPU-side delay:
      // a slower GPU makes its own host wait longer in its syncs, not arrive later.
      v.cause = CauseClass::host;
      const double runnable = avg(slow, &WorkerLateness::runnable_per_cpu);
      if (runnable > 1) {
        std::snprintf(buf, sizeof buf, "CPU contention: no more CPU time (%+.2f ms) or blocking (%+.2f ms) per step than "
                      "the others, on a host with %.1f runnable threads per CPU (its threads waited for a CPU)",
                      d_cpu / 1e6, d_off / 1e6, runnable);
      } else {
        v.confidence *= 0.7;
        std::snprintf(buf, sizeof buf, "late on the host with no more CPU time (%+.2f ms) or blocking (%+.2f ms) per step "
                      "than the others: its threads were runnable but not running (CPU contention on its cores), or "
                      "blocked in waits shorter than the recorder's 0.2 ms", d_cpu / 1e6, d_off / 1e6);
      }
    }
    v.cause_detail = buf;
    // Where: the function the late set spent that time in (the most frequent leaf of the relevant samples).
    if (v.cause == CauseClass::host || v.cause == CauseClass::compute) {
      std::map<uint32_t, double> where;
      for (int w : slow) {
        if (v.cause == CauseClass::host) {
          for (auto& op : set.workers[w].ops)
            if (op.kind == OpKind::offcpu && op.start_ns >= t0 && op.start_ns < t1) where[op.name] += double(op.duration_ns);
        } else {
          for (auto& s : set.workers[w].cpu_samples)
            if (s.start_ns >= t0 && s.start_ns < t1) where[s.name] += double(s.duration_ns);
        }
      }
      if (!where.empty()) {
        const auto top = std::max_element(where.begin(), where.end(), [](auto& a, auto& b) { return a.second < b.second; });
        v.cause_detail += "; mostly in " + set.names[top->first];
      }
    }
  }
  v.excess_ns = std::min(v.excess_ns, v.recorded_ns);
  return v;
}

}  // namespace stackscope::analyze
