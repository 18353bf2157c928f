// The probe gates of the uprobe families and their cost budget (UprobeTracer's, trace/uprobe_tracer.h): attaching
// and detaching a family's probe sets, the watched windows and their series, the budget's price per hit and its
// shares, and the thread that duty-cycles the hot families. Kept apart from discovery and the ring buffers.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <utility>

#include <fmt/format.h>

#include "events.h"
#include "model/clock.h"
#include "trace/uprobe_tracer.h"

namespace stackscope::trace {

namespace {

// A family costing under 5 ms of CPU a second is never sampled (rebalance_budget).
constexpr double kNegligibleCores = 0.005;

// utime + stime of a process, in clock ticks (all its threads); 0 when gone.
uint64_t process_cpu_ticks(uint32_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(in, text);
  auto close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(text.substr(close + 2));
  std::string field;
  uint64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::strtoull(field.c_str(), nullptr, 10);
    if (i == 15) stime = std::strtoull(field.c_str(), nullptr, 10);
  }
  return utime + stime;
}

// Busy ticks of the whole machine (/proc/stat: user nice system irq softirq steal), for --all.
uint64_t system_busy_ticks() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  uint64_t v[8] = {};
  in >> cpu;
  for (auto& x : v) in >> x;
  return v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
}

}  // namespace

// What the calibration probe is attached to: a function of this binary that does nothing. It starts with `lea`,
// which the kernel single-steps (about 5 us a hit on the GPU machines) where the probed CUDA, NCCL and torch
// functions start with `push`, emulated at about 0.9 us in a tight loop. The higher price is kept on purpose: inside
// a real job a hit costs several times the tight loop's figure (cold caches, TLB, the job's own threads), and on
// the H100 pricing hits at the push figure let the budget attach 5x longer, which cost +27.5 % on the launch-bound
// workload and +71 % on small-batch inference against +0.1 % and +16 % at this price (docs/benchmarks/probe-cost.md).
extern "C" __attribute__((noinline, used)) int stackscope_uprobe_calibration_target(int x) {
  asm volatile("" ::: "memory");
  return x + 1;
}

namespace {

// libbpf's option structs, zeroed and sized (LIBBPF_OPTS's designated initialisers warn in C++).
bpf_uprobe_opts uprobe_opts(uint64_t cookie, bool retprobe) {
  bpf_uprobe_opts o{};
  o.sz = sizeof o;
  o.bpf_cookie = cookie;
  o.retprobe = retprobe;
  return o;
}

bpf_uprobe_multi_opts uprobe_multi_opts(const std::vector<uint64_t>& offsets, const std::vector<uint64_t>* cookies,
                                        bool retprobe) {
  static_assert(sizeof(uint64_t) == sizeof(__u64));
  bpf_uprobe_multi_opts o{};
  o.sz = sizeof o;
  o.offsets = offsets.data();  // unsigned long: uint64_t on LP64
  o.cookies = cookies ? reinterpret_cast<const __u64*>(cookies->data()) : nullptr;
  o.cnt = offsets.size();
  o.retprobe = retprobe;
  return o;
}

}  // namespace

// Return probes first: a call entered between the two attachments then has a return without an entry (counted,
// ignored) rather than an entry that no return ever closes. detach_set() removes entries first for the same reason.
size_t UprobeTracer::attach_set(int family, ProbeSet& set, bool entry_only, uint32_t cookie_mod,
                                const std::set<uint64_t>* only, bool outside) {
  const FamilyProgs progs = progs_of(family);
  const char* path = set.host_path.c_str();
  // The probes kept: entries whose cookie cookie_mod divides only, those of the hit set only or outside it only (only).
  cookie_mod = std::max<uint32_t>(1, cookie_mod);
  auto in_only = [&](uint64_t cookie) { return !only || (only->count(cookie) > 0) != outside; };
  auto kept = [&](uint64_t cookie) { return cookie % cookie_mod == 0 && in_only(cookie); };
  std::vector<uint64_t> kept_offsets, kept_cookies, kept_ret_offsets, kept_ret_cookies;
  const bool filtered = cookie_mod > 1 || only;
  if (filtered) {
    for (size_t i = 0; i < set.offsets.size(); ++i)
      if (kept(set.cookies[i])) {
        kept_offsets.push_back(set.offsets[i]);
        kept_cookies.push_back(set.cookies[i]);
      }
    if (kept_offsets.empty()) return 0;
    for (size_t i = 0; i < (only ? set.ret_offsets.size() : 0); ++i)
      if (in_only(set.ret_cookies[i])) {
        kept_ret_offsets.push_back(set.ret_offsets[i]);
        kept_ret_cookies.push_back(set.ret_cookies[i]);
      }
  }
  const std::vector<uint64_t>& offsets = filtered ? kept_offsets : set.offsets;
  const std::vector<uint64_t>& cookies = filtered ? kept_cookies : set.cookies;
  const std::vector<uint64_t>& ret_offsets = only ? kept_ret_offsets : set.ret_offsets;
  const std::vector<uint64_t>& ret_cookies = only ? kept_ret_cookies : set.ret_cookies;
  if (use_multi_ && progs.entry_multi && progs.ret_multi) {
    bpf_link* ret = nullptr;
    if (!ret_offsets.empty() && !entry_only) {
      auto ro = uprobe_multi_opts(ret_offsets, &ret_cookies, true);
      ret = bpf_program__attach_uprobe_multi(progs.ret_multi, set.pid_filter, path, nullptr, &ro);
    }
    if (ret || ret_offsets.empty() || entry_only) {
      auto eo = uprobe_multi_opts(offsets, &cookies, false);
      if (bpf_link* entry = bpf_program__attach_uprobe_multi(progs.entry_multi, set.pid_filter, path, nullptr, &eo)) {
        if (ret) set.links.push_back(ret);
        set.links.push_back(entry);
        return offsets.size();
      }
    }
    const int e = errno;
    if (ret) bpf_link__destroy(ret);
    if (e == ENOENT || e == ESRCH) return 0;  // the process (its /proc/PID/root) is gone
    note_once(fmt::format("{}: uprobe_multi link refused ({}): one uprobe per probe there", set.host_path,
                          std::strerror(e)));
    if (e == EOPNOTSUPP || e == ENOSYS) use_multi_ = false;
  }
  int failures = 0;
  for (size_t i = 0; i < (entry_only ? 0 : ret_offsets.size()); ++i) {
    auto ro = uprobe_opts(ret_cookies[i], true);
    if (bpf_link* l = bpf_program__attach_uprobe_opts(progs.ret, set.pid_filter, path, ret_offsets[i], &ro))
      set.links.push_back(l);
    else
      ++failures;
  }
  size_t attached = 0;
  for (size_t i = 0; i < offsets.size(); ++i) {
    auto eo = uprobe_opts(cookies[i], false);
    if (bpf_link* l = bpf_program__attach_uprobe_opts(progs.entry, set.pid_filter, path, offsets[i], &eo)) {
      set.links.push_back(l);
      ++attached;
    } else {
      ++failures;
    }
  }
  if (failures)
    note_once(fmt::format("{}: {} probe(s) failed to attach (pid filter {}): {}", set.host_path, failures,
                          set.pid_filter, std::strerror(errno)));
  return attached;
}

void UprobeTracer::detach_set(ProbeSet& set) {
  destroy_links({set.links.rbegin(), set.links.rend()}, {});
  set.links.clear();
}

// The series that says when a family's probes were attached: 1 from now while they are, 0 while detached.
// Called with gate_mu_ held.
void UprobeTracer::add_watching_series(int family) {
  auto& g = gates_[static_cast<size_t>(family)];
  if (g.has_watching || g.watching_name.empty()) return;
  SeriesInfo w;
  w.name = g.watching_name;
  w.subsystem = Subsystem::software;
  w.unit = "ratio";
  w.kind = SeriesKind::gauge;
  w.category = SeriesCategory::static_value;  // says when calls were watched, not a signal
  w.host = copts_.host;
  w.source = "ebpf";
  g.watching = sink_->add_series(w);
  g.has_watching = true;
  g.first_ns = monotonic_ns();
  if (g.on) {
    g.on_since_ns = g.first_ns;  // watched time counts from the family's first probes
    Sample s{g.watching, g.first_ns, 1.0};
    sink_->append_samples({&s, 1});
  }
}

bool UprobeTracer::add_probe_set(int family, ProbeSet set, bool watched) {
  if (set.offsets.empty()) return false;
  std::lock_guard<std::mutex> lock(gate_mu_);
  auto& g = gates_[static_cast<size_t>(family)];
  if (watched) add_watching_series(family);
  const bool entry_only = g.on && g.entry_only && !set.steady;
  if ((g.on || set.steady) && !attach_set(family, set, entry_only, entry_only ? g.cookie_mod : 1)) {
    detach_set(set);  // a partial attach (return probes without their entries) must not trap calls until exit
    return false;
  }
  g.sets.push_back(std::move(set));
  return true;
}

// The watched interval must contain every reported call's start: its opening time is read before capture is
// enabled, and its closing time after capture is disabled (a call that saw the flag set started in between).
// An entry-only window (g.entry_only) captures nothing and is not watched: it only times the job's CPU per call.
// Called with gate_mu_ held.
void UprobeTracer::set_watching(int family, bool on) {
  auto& g = gates_[static_cast<size_t>(family)];
  const bool counted = !(on ? g.entry_only : g.on && g.entry_only);
  int64_t t = 0;
  if (on) {
    t = monotonic_ns();
    end_span(family, SampledSpanKind::unwatched, t);
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (uint32_t* flag = capture_flag_of(family)) *flag = on && counted ? 1 : 0;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!on) t = monotonic_ns();
  if (on) {
    g.on_since_ns = t;
    g.window_hits0 = g.window_mark = read_counter(counters_of(family), SS_CNT_HITS);
    // Calls returning after the first detach's sample are in the series by now (sampled every interval).
    if (g.spans_open && g.ops_at_first_detach < 0 && family == kTorch && torch_ && !topts_.full_detail)
      g.ops_at_first_detach = static_cast<int64_t>(torch_->calls_in_series());
  } else if (g.on) {
    const uint64_t hits = read_counter(counters_of(family), SS_CNT_HITS);
    g.period_window_hits += hits - std::min(hits, g.window_mark);
    g.window_mark = hits;
    if (counted) g.watched_ns += t - g.on_since_ns;
    g.period_watched_ns += t - std::max(g.on_since_ns, budget_mark_ns_);  // the budget prices every window
    if (g.cycling && counted && t > g.on_since_ns) {  // this window's hit rate: how steady the sampled family is
      const double rate = static_cast<double>(hits - g.window_hits0) /
                          (static_cast<double>(t - g.on_since_ns) / 1e9);
      if (g.windows++) g.rate_ssd += (rate - g.last_rate) * (rate - g.last_rate);
      g.rate_sum += rate;
      g.last_rate = rate;
    }
    if (g.spans_open) {
      end_span(family, counted  ? SampledSpanKind::counted
                       : g.subset ? SampledSpanKind::entry_subset
                                  : SampledSpanKind::entry_only,
               t);
    } else if (g.cycling && !g.fixed && g.calibrate) {  // the budget's first detach: from here on counts are estimated
      g.spans_open = true;
      g.spans_since_ns = g.span_wall0 = t;
      g.span_cpu0 = traced_cpu_ns();
      g.span_hits0 = hits;
      g.span_syncs0 = family == kTorch && torch_ ? torch_->syncs_so_far() : -1;
    }
  }
  g.on = on;
  if (g.has_watching && counted) {
    Sample s{g.watching, t, on ? 1.0 : 0.0};
    sink_->append_samples({&s, 1});
  }
}

void UprobeTracer::end_span(int family, SampledSpanKind ended, int64_t t_ns) {
  auto& g = gates_[static_cast<size_t>(family)];
  if (!g.spans_open) return;
  const int64_t cpu = traced_cpu_ns();
  const uint64_t hits = read_counter(counters_of(family), SS_CNT_HITS);
  SampledSpan s;
  s.kind = ended;
  s.wall_ns = t_ns - g.span_wall0;
  s.cpu_ns = cpu >= 0 && g.span_cpu0 >= 0 ? cpu - g.span_cpu0 : -1;
  s.hits = hits - std::min(hits, g.span_hits0);
  if (family == kTorch && torch_) {  // its steps, for the estimate from the synchronisations
    const int64_t syncs = torch_->syncs_so_far();
    s.syncs = syncs >= 0 && g.span_syncs0 >= 0 ? syncs - std::min(syncs, g.span_syncs0) : -1;
    g.span_syncs0 = syncs;
    if (ended == SampledSpanKind::counted) {
      const TorchProbes::StepWindow w = torch_->read_step_windows();
      s.sync_intervals = w.intervals;
      s.interval_calls = static_cast<double>(w.interval_calls);
      s.captured_calls = static_cast<double>(w.calls);
      s.syncing_calls = static_cast<double>(w.syncing_calls);
    }
  }
  g.spans.push_back(s);
  g.span_cookie_mods.push_back(ended == SampledSpanKind::entry_only || ended == SampledSpanKind::entry_subset
                                   ? g.cookie_mod
                                   : 1);
  g.span_wall0 = t_ns;
  g.span_cpu0 = cpu;
  g.span_hits0 = hits;
}

// Exact to the ns and current for running threads (task_clock.h); a process whose counters could not be opened is
// read from its process CPU clock (up to a scheduler tick behind).
int64_t UprobeTracer::traced_cpu_ns() {
  if (copts_.all_processes) return -1;
  for (auto pid : traced_pids()) {
    int64_t ns = task_clocks_.read(pid);
    if (ns < 0) {
      clockid_t clock;
      timespec ts{};
      if (clock_getcpuclockid(static_cast<pid_t>(pid), &clock) != 0 || clock_gettime(clock, &ts) != 0) continue;
      ns = static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
    }
    auto [it, added] = cpu_ns_by_pid_.try_emplace(pid, ns, ns);
    it->second.second = ns;
  }
  int64_t total = 0;
  for (auto& [pid, v] : cpu_ns_by_pid_) total += v.second - v.first;
  return total;
}

// Attaches (on) or detaches (off) every probe set of a family. Calls are reported only between set_watching(true),
// once all are attached, and set_watching(false), before any is detached. Called with gate_mu_ held.
void UprobeTracer::switch_gate(int family, bool on, bool entry_only, bool subset, uint32_t cookie_mod,
                               bool hits_only) {
  auto& g = gates_[static_cast<size_t>(family)];
  if (on == g.on) return;
  int64_t t0 = monotonic_ns();
  const uint64_t hits0 = read_counter(counters_of(family), SS_CNT_HITS);
  if (on) {
    bool returns = false;
    hits_only = hits_only && !g.hit_cookies.empty();
    // A full-set window of a family with a hit set attaches the sites outside it first, as links of their own: they
    // are rarely called, so their slow install traps almost nothing (every site in one link trapped the hot calls
    // for the whole of it: 14,768-32,436 calls a window on the CPU VM's tiny loop against 2,256-2,293 restricted).
    const bool split = !hits_only && !entry_only && family == kTorch && !g.hit_cookies.empty() && g.spans_open &&
                       topts_.torch_hit_set;
    size_t sites = 0;
    for (auto& set : g.sets) {
      if (set.steady || !split) continue;
      sites += attach_set(family, set, false, 1, &g.hit_cookies, /*outside=*/true);
      set.cold_links = set.links.size();
    }
    const uint64_t cold_attach_hits = read_counter(counters_of(family), SS_CNT_HITS) - hits0;
    for (auto& set : g.sets) {
      if (set.steady) continue;
      sites += attach_set(family, set, entry_only, entry_only ? cookie_mod : 1,
                          hits_only || split ? &g.hit_cookies : nullptr);
      returns |= !set.ret_offsets.empty();  // an entry-only window's entries too start from empty stacks
    }
    g.hits_only = hits_only;
    g.sites_now = sites;
    // Calls in flight at the last detach, or entered while attaching, never return through a probe: forget every
    // thread's stack of calls. Not where the cycled probes are all entry-only: the stacks then hold only steady
    // calls, whose probes stayed attached (a synchronisation in progress keeps its entry).
    if (bpf_map* m = returns ? thread_map_of(family) : nullptr) {
      int fd = bpf_map__fd(m);
      for (uint32_t tid; bpf_map_get_next_key(fd, nullptr, &tid) == 0;)
        if (bpf_map_delete_elem(fd, &tid) != 0) break;
    }
    g.entry_only = entry_only;
    g.subset = entry_only && subset;
    g.cookie_mod = entry_only ? std::max<uint32_t>(1, cookie_mod) : 1;
    if (family == kTorch && torch_) torch_->clear_step_windows();  // counted afresh while capture is on
    set_watching(family, true);
    const int64_t took = monotonic_ns() - t0;
    g.attach_ns += took;
    ++g.attaches;
    // The duty cycle's windows after the budget's first detach, by the sites they hold (not the full attachment
    // the budget goes back to when the family turns quiet).
    g.window_in_stats = g.spans_open && g.cycling;
    if (g.window_in_stats) {
      auto& w = hits_only ? g.restricted : g.full_set;
      ++w.windows;
      w.attach_ns += took;
      w.min_sites = std::min(w.min_sites, sites);
      w.max_sites = std::max(w.max_sites, sites);
      w.toggle_hits += g.window_hits0 - std::min(g.window_hits0, hits0);  // set_watching read it as the window opened
      if (split) w.cold_hits += cold_attach_hits;
    }
  } else {
    const bool counted = !g.entry_only, spans_were_open = g.spans_open;  // the first detach opens them
    set_watching(family, false);
    // The operators' counts at the close of a counted window: what was counted before the budget's first detach is
    // whole, and readers find it at once rather than up to an interval earlier. The operators counted so far are the
    // hit set that later windows attach; one that a full-set window finds after the first detach is noted.
    if (counted && family == kTorch && torch_ && !topts_.full_detail) {
      torch_->sample_ops(*sink_, copts_.host);
      if (budgeted())
        for (uint32_t op : torch_->ops_counted())
          if (g.hit_cookies.insert(op).second && spans_were_open) g.found_late.emplace_back(op, monotonic_ns());
    }
    // Every link of the family at once: while the entry link's detach waits for the kernel, the return link's
    // breakpoint would still trap every call (a return probe traps at the entry too). A full-set window's links
    // outside the hit set go after the others (their sites are rarely called: they trap almost nothing meanwhile).
    std::vector<bpf_link*> links, cold;
    for (auto& set : g.sets) {
      if (set.steady) continue;
      const auto first_hot = set.links.begin() + static_cast<ptrdiff_t>(std::min(set.cold_links, set.links.size()));
      links.insert(links.end(), set.links.rbegin(), std::make_reverse_iterator(first_hot));
      cold.insert(cold.end(), std::make_reverse_iterator(first_hot), set.links.rend());
      set.links.clear();
      set.cold_links = 0;
    }
    destroy_links(links, {});
    if (!cold.empty()) {
      const uint64_t before_cold = read_counter(counters_of(family), SS_CNT_HITS);
      destroy_links(cold, {});
      const uint64_t after_cold = read_counter(counters_of(family), SS_CNT_HITS);
      if (g.window_in_stats) g.full_set.cold_hits += after_cold - std::min(after_cold, before_cold);
    }
    const int64_t took = monotonic_ns() - t0;
    g.detach_ns += took;
    if (!spans_were_open && g.spans_open) {  // the budget's first detach
      g.first_detach_ns = took;
      const uint64_t hits = read_counter(counters_of(family), SS_CNT_HITS);
      g.first_detach_hits = hits - std::min(hits, g.window_mark);
    }
    if (spans_were_open && std::exchange(g.window_in_stats, false)) {
      auto& w = g.hits_only ? g.restricted : g.full_set;
      w.detach_ns += took;
      const uint64_t hits = read_counter(counters_of(family), SS_CNT_HITS);
      w.toggle_hits += hits - std::min(hits, g.window_mark);  // set_watching read it as the window closed
    }
    g.entry_only = g.subset = g.hits_only = false;
    g.cookie_mod = 1;
    ++g.period_cycles;
    ++g.cycles;
  }
}

double UprobeTracer::watched_fraction(Layer layer) const {
  int family = 0;
  while (family < kUprobeFamilies && !(this->family(family) && this->family(family)->layer() == layer)) ++family;
  if (family == kUprobeFamilies) return 1.0;  // no uprobe family of that layer: never duty-cycled
  std::lock_guard<std::mutex> lock(gate_mu_);
  auto& g = gates_[static_cast<size_t>(family)];
  int64_t now = monotonic_ns(), watched = g.watched_ns + (g.on && !g.entry_only ? now - g.on_since_ns : 0);
  const int64_t since = g.first_ns ? g.first_ns : start_ns_;
  return now > since ? static_cast<double>(watched) / static_cast<double>(now - since) : 1.0;
}

// Every interval: torch operator series; every budget period: the families' shares; at each window edge: attach
// or detach a duty-cycled family.
void UprobeTracer::control_loop() {
  using clock = std::chrono::steady_clock;
  const auto interval = std::chrono::milliseconds(std::max(1, copts_.interval_ms));
  // The budget is rebalanced every second (or every period, if shorter), whatever the duty cycle's period: a family
  // that turns hot is cycled within a second.
  const auto budget_period = std::chrono::milliseconds(std::clamp(topts_.budget_period_ms, 10, 1000));
  // The first look comes early: a hot family costs its full price until then.
  auto next_sample = clock::now() + interval,
       next_budget = clock::now() + std::min<clock::duration>(budget_period, std::chrono::milliseconds(200));
  auto last_budget = clock::now();
  // Between rebalances, a family still fully attached is looked at every 100 ms (budget_overrun).
  constexpr auto kOverrunCheck = std::chrono::milliseconds(100);
  auto next_check = clock::now() + kOverrunCheck;
  job_cpu_seconds();  // the baseline
  while (!stopping_) {
    auto wake = next_sample;
    if (budgeted()) wake = std::min({wake, next_budget, next_check});
    {
      std::lock_guard<std::mutex> lock(gate_mu_);
      for (auto& g : gates_)
        if (g.cycling) wake = std::min(wake, g.next_toggle);
    }
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_until(lock, wake, [&] { return stopping_.load(); });
    }
    if (stopping_) break;
    auto now = clock::now();
    if (now >= next_sample) {
      if (torch_ && !topts_.full_detail) torch_->sample_ops(*sink_, copts_.host);
      next_sample += interval;
      if (next_sample < now) next_sample = now + interval;
    }
    if (budgeted() && now >= next_check) {
      if (now < next_budget && budget_overrun(std::chrono::duration<double>(now - last_budget).count()))
        next_budget = now;
      next_check = now + kOverrunCheck;
    }
    if (budgeted() && now >= next_budget) {
      rebalance_budget(std::chrono::duration<double>(now - last_budget).count());
      last_budget = now;
      next_budget = now + budget_period;
    }
    std::lock_guard<std::mutex> lock(gate_mu_);
    for (int f = 0; f < kUprobeFamilies; ++f) {
      auto& g = gates_[static_cast<size_t>(f)];
      if (!g.cycling || clock::now() < g.next_toggle) continue;
      const auto period = std::chrono::milliseconds(g.period_ms);
      if (g.on) {
        switch_gate(f, false);
        g.next_toggle = g.window_start + period;
        if (g.next_toggle < clock::now()) g.next_toggle = clock::now() + period / 2;  // detaching overran it
      } else {
        g.window_start = clock::now();
        // A family with return probes alternates counted windows with entry-only ones, on every operator and on
        // the even half, or on the even half and a quarter (sampled_count.h): counted, entry-only, counted,
        // entry-only on the subset; four short windows (half on_ms), then four long ones (one and a half).
        const bool calibrating = g.calibrate && g.spans_open;
        const uint64_t k = calibrating ? g.window_index++ : 0;
        const bool entry_only = calibrating && k % 2 == 1, subset = calibrating && k % 4 == 3;
        const double stretch = calibrating ? ((k / 4) % 2 ? 1.5 : 0.5) : 1.0;
        // The hit set only, but in one window of every kFullSetEvery (a long counted one: the operators a window
        // found are read from its counts, and the CPU fit takes only entry-only windows, which all hold the same
        // sites). Long, as an operator called once every few ms is seen only if the window outlasts that: a short
        // one (half on_ms, 2.5-4 ms at a 1 % budget) saw the CPU VM's late relu, called every 3-4 ms under the
        // probes, in 1 run of 3; the watching costs what the restricted window it replaces would, beside the
        // toggles' 10 + 90 ms. Why a count and not a time: the toggles' price per window stays bounded, (7
        // restricted + 1 full) / 8, and each pair of blocks of four windows (the error's jackknife) has the same
        // make-up; an operator first called later is found within eight periods (40 s at the default 5 s).
        const bool hits_only = calibrating && topts_.torch_hit_set && k % kFullSetEvery != kFullSetWindow;
        // The entry-only windows' entries: every operator's and the even ids' (one and a half traps a call), or,
        // where the operators counted so far split so, the even ids' and the multiples of four's (a half and a
        // quarter): the fit then extrapolates to no trap from nearer (sampled_count.h).
        uint32_t cookie_mod = 1;
        if (entry_only) {
          const double quarter = f == kTorch && torch_ ? torch_->share_of_ops_divisible_by(4) : 0;
          const bool quarters = quarter >= kMinQuarterShare &&
                                torch_->share_of_ops_divisible_by(2) - quarter >= kMinQuarterShare;
          cookie_mod = (subset ? 2 : 1) * (quarters ? 2 : 1);
        }
        switch_gate(f, true, entry_only, subset, cookie_mod, hits_only);
        // The window is on_ms of watching, counted from when the links are attached: attaching takes 4-20 ms
        // here, and a 5 ms window timed from before it watched almost nothing (0.01 % instead of 1.7 %).
        g.next_toggle = clock::now() + std::chrono::microseconds(std::lround(g.on_ms * stretch * 1000));
      }
    }
  }
}

// The job's CPU time since the last call, in seconds: its processes' (the traced ones), or the machine's (--all).
double UprobeTracer::job_cpu_seconds() {
  static const double hz = static_cast<double>(::sysconf(_SC_CLK_TCK));
  if (copts_.all_processes) {
    uint64_t busy = system_busy_ticks(), prev = system_busy_ticks_;
    system_busy_ticks_ = busy;
    return prev && busy > prev ? static_cast<double>(busy - prev) / hz : 0;
  }
  uint64_t delta = 0;
  std::map<uint32_t, uint64_t> now;
  for (auto pid : traced_pids()) {
    uint64_t ticks = process_cpu_ticks(pid);
    now[pid] = ticks;
    auto it = cpu_ticks_.find(pid);
    uint64_t before = it != cpu_ticks_.end() ? it->second : 0;
    if (ticks > before) delta += ticks - before;
  }
  cpu_ticks_.swap(now);
  return static_cast<double>(delta) / hz;
}

// Each family's cost at full attachment is its hit rate while attached times the price of a hit. When they add up
// to more than budget_pct of the job's own CPU time, the budget is shared out water-filling: the cheap families
// stay attached, the hot ones get equal shares and are attached for that fraction of each period.
void UprobeTracer::rebalance_budget(double period_s) {
  if (period_s <= 0) return;
  const double job_cores = job_cpu_seconds() / period_s;
  last_job_cores_ = job_cores;
  std::lock_guard<std::mutex> lock(gate_mu_);
  const int64_t now = monotonic_ns();
  std::vector<std::pair<double, int>> costs;  // cores at full attachment, family
  double overhead = 0, steady_cost = 0;  // steady: probes never cycled, paid first out of the budget
  for (int f = 0; f < kUprobeFamilies; ++f) {
    auto& g = gates_[static_cast<size_t>(f)];
    if (g.fixed || g.watching_name.empty() || g.sets.empty()) continue;
    const uint64_t steady_hits = read_counter(counters_of(f), SS_CNT_STEADY_HITS);
    steady_cost += static_cast<double>(steady_hits - g.steady_hits_prev) * hit_cost_ns_ / 1e9 / period_s;
    g.steady_hits_prev = steady_hits;
    const uint64_t hits = read_counter(counters_of(f), SS_CNT_HITS);
    if (g.on) {
      g.period_window_hits += hits - std::min(hits, g.window_mark);
      g.window_mark = hits;
    }
    // Hits inside the watched windows give the family's rate; the rest trapped while its links were being attached
    // or detached: the toggles' price, paid whatever the watched share.
    const uint64_t period_hits = hits - std::min(hits, g.hits_prev);
    const uint64_t in_windows = std::min(g.period_window_hits, period_hits), off = period_hits - in_windows;
    g.period_window_hits = 0;
    g.off_hits += off;
    const int64_t watched = g.period_watched_ns + (g.on ? now - std::max(g.on_since_ns, budget_mark_ns_) : 0);
    g.period_watched_ns = 0;
    if (watched > 5'000'000) g.full_rate = static_cast<double>(in_windows) / (static_cast<double>(watched) / 1e9);
    g.hits_prev = hits;
    const double off_s = static_cast<double>(off) * hit_cost_ns_ / 1e9;
    g.pending_off_s += off_s;  // a cycle's hits may fall in two rebalances: priced once a cycle has ended
    if (g.period_cycles > 0) {
      const double per_cycle = g.pending_off_s / g.period_cycles;
      g.cycle_cost_s = g.cycle_cost_s > 0 ? (g.cycle_cost_s + per_cycle) / 2 : per_cycle;
      g.pending_off_s = 0;
    }
    // With the hit set, a cycle is priced from the windows' own toggles, seven restricted ones for one with every
    // site: the smoothed figure above swings with the kind of the last window (a full-set one trapped 6.5x the calls
    // of a restricted one in a CPU VM recording, 14,768 against 2,256) and held the period at its 20 s cap.
    if (g.restricted.windows) {
      auto mean = [](const ProbeGate::WindowSites& w) {
        return static_cast<double>(w.toggle_hits) / static_cast<double>(w.windows);
      };
      const double restricted = mean(g.restricted), full = g.full_set.windows ? mean(g.full_set) : restricted;
      g.cycle_cost_s = (static_cast<double>(kFullSetEvery - 1) * restricted + full) /
                       static_cast<double>(kFullSetEvery) * hit_cost_ns_ / 1e9;
    }
    g.period_cycles = 0;
    const double cost = g.full_rate * hit_cost_ns_ / 1e9;
    overhead += cost * (g.cycling ? g.fraction : 1.0) + off_s / period_s;
    costs.emplace_back(cost, f);
  }
  budget_mark_ns_ = now;
  if (costs.empty()) return;
  overhead += steady_cost;
  double budget = std::max(0.0, topts_.budget_pct / 100.0 * std::max(0.0, job_cores - overhead) - steady_cost);
  std::sort(costs.begin(), costs.end());
  size_t left = costs.size();
  const double base_period_s = std::max(10, topts_.budget_period_ms) / 1000.0,
               max_period_s = std::max(base_period_s, topts_.budget_max_period_ms / 1000.0);
  for (auto& [cost, f] : costs) {
    auto& g = gates_[static_cast<size_t>(f)];
    const double share = budget / static_cast<double>(left--);
    // A family costing under 5 ms of CPU a second is never sampled, however idle the job: its calls are too few
    // to matter and too few to estimate from a sample. Otherwise it is watched >= 0.5 % of the time, so rates are
    // still seen. Its toggles cost cycle_cost_s each: the period grows until they take at most a quarter of the
    // share, and the watched share is what is left.
    double fraction = 1.0, cycle_s = base_period_s;
    if (cost > std::max(share, kNegligibleCores)) {
      if (g.cycle_cost_s > 0)
        cycle_s = share > 0 ? std::clamp(4 * g.cycle_cost_s / share, base_period_s, max_period_s) : max_period_s;
      fraction = std::clamp((share - g.cycle_cost_s / cycle_s) / cost, 0.005, 1.0);
    }
    if (fraction > 0.95) fraction = 1.0;
    budget -= std::min(cost, share);
    const bool was_cycling = g.cycling;
    g.fraction = fraction;
    g.cycling = fraction < 1.0;
    if (g.ever_cycled && was_cycling != g.cycling) {  // fully attached again while the family is quiet (its note)
      if (!g.cycling) g.uncycled_since_ns = now;
      else if (g.uncycled_since_ns) g.uncycled_ns += now - std::exchange(g.uncycled_since_ns, 0);
    }
    if (g.cycling) {
      g.period_ms = static_cast<int>(std::lround(cycle_s * 1000));
      g.on_ms = std::max(5, static_cast<int>(std::lround(fraction * g.period_ms)));
      if (!was_cycling) {
        g.window_start = std::chrono::steady_clock::now();
        g.next_toggle = g.window_start + std::chrono::milliseconds(g.on_ms);
        if (!g.ever_cycled) {
          g.cycling_since_ns = now;
          g.watched_before_cycling_ns = g.watched_ns + (g.on ? now - g.on_since_ns : 0);
        }
        if (!g.ever_cycled)
          sink_->add_note("trace", fmt::format("{}: probes would cost {:.1f}% of the job's CPU ({:.0f} hits/s x {:.0f} "
                                               "ns): attached {:.1f}% of each {} ms to stay within the {}% budget",
                                               family_name(f), job_cores > 0 ? 100 * cost / job_cores : 0.0,
                                               g.full_rate, hit_cost_ns_, 100 * fraction, g.period_ms,
                                               topts_.budget_pct));
        g.ever_cycled = true;
      }
    } else if (was_cycling && (!g.on || g.entry_only)) {
      if (g.on) switch_gate(f, false);  // an entry-only window counts nothing: reattach with the returns
      switch_gate(f, true);
    }
  }
}

// Whether a family that is still fully attached has, since the last rebalance, cost more than twice its share of
// the budget at the job's CPU as last measured: the rebalance is then brought forward. A family turns hot when the job
// starts calling it (a training loop after the imports), and until the next rebalance (up to a second) it paid full
// price: on the tiny-operator CPU loop, a few hundred ms at 3-5x the job's own CPU.
bool UprobeTracer::budget_overrun(double since_s) {
  if (since_s < 0.2) return false;  // the job's CPU is read in clock ticks: shorter periods say little
  std::lock_guard<std::mutex> lock(gate_mu_);
  const double limit = std::max(2 * topts_.budget_pct / 100.0 * last_job_cores_, kNegligibleCores);
  for (int f = 0; f < kUprobeFamilies; ++f) {
    auto& g = gates_[static_cast<size_t>(f)];
    if (g.cycling || g.fixed || g.watching_name.empty() || g.sets.empty()) continue;
    const uint64_t hits = read_counter(counters_of(f), SS_CNT_HITS);
    if (static_cast<double>(hits - std::min(hits, g.hits_prev)) * hit_cost_ns_ / 1e9 / since_s > limit) return true;
  }
  return false;
}

// The price of one probe hit here: a function of this binary called with and without the calibration probe (a
// program that only counts). Falls back to 5 us, what a hit costs on the GPU machines (docs/benchmarks/probe-cost.md).
void UprobeTracer::measure_hit_cost() {
  hit_cost_ns_ = topts_.hit_cost_ns > 0 ? topts_.hit_cost_ns : 5000.0;
  if (topts_.hit_cost_ns > 0 || !proc_) return;
  auto addr = reinterpret_cast<uint64_t>(&stackscope_uprobe_calibration_target);
  std::string path;
  uint64_t offset = 0;
  for (auto& m : read_proc_maps(static_cast<uint32_t>(::getpid())))
    if (addr >= m.start && addr < m.end && m.exec && !m.path.empty() && m.path[0] == '/') {
      path = m.path;
      offset = addr - m.start + m.offset;
    }
  if (path.empty()) return;
  int (*volatile fn)(int) = &stackscope_uprobe_calibration_target;
  // The quickest of many short batches: a batch that the scheduler interrupted says nothing of the probe.
  constexpr int kBatch = 100, kBatches = 40, kCalls = kBatch * kBatches;
  auto run = [&] {
    int64_t best = INT64_MAX;
    int x = 0;
    for (int b = 0; b < kBatches; ++b) {
      int64_t t0 = monotonic_ns();
      for (int i = 0; i < kBatch; ++i) x = fn(x);
      best = std::min(best, monotonic_ns() - t0);
    }
    return best;
  };
  const int64_t bare = run();
  bpf_link* link = nullptr;
  if (use_multi_) {
    std::vector<uint64_t> offsets{offset};
    auto o = uprobe_multi_opts(offsets, nullptr, false);
    link = bpf_program__attach_uprobe_multi(proc_->calibrate_multi(), ::getpid(), path.c_str(), nullptr, &o);
  }
  if (!link) link = bpf_program__attach_uprobe_opts(proc_->calibrate(), ::getpid(), path.c_str(), offset, nullptr);
  if (!link) return;
  const uint64_t hits0 = read_counter(proc_->counters(), SS_CNT_HITS);
  const int64_t probed = run();
  const uint64_t hits = read_counter(proc_->counters(), SS_CNT_HITS) - hits0;
  bpf_link__destroy(link);
  if (hits >= static_cast<uint64_t>(kCalls) && probed > bare)
    hit_cost_ns_ = static_cast<double>(probed - bare) / kBatch;
}

}  // namespace stackscope::trace
