#include "trace/uprobe_tracer.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include <fmt/format.h>

#include "events.h"
#include "model/clock.h"
#include "model/process.h"
#include "trace/symbol_names.h"

namespace stackscope::trace {

namespace {

std::atomic<bool> g_libbpf_verbose{false};

int libbpf_print(enum libbpf_print_level level, const char* format, va_list args) {
  if (!g_libbpf_verbose || level == LIBBPF_DEBUG) return 0;
  return std::vfprintf(stderr, format, args);
}

void prepare_system() {
  rlimit r{RLIM_INFINITY, RLIM_INFINITY};
  setrlimit(RLIMIT_MEMLOCK, &r);  // kernels before 5.11 charge BPF maps to memlock
  struct stat st {};
  if (::stat("/sys/kernel/tracing/events", &st) != 0)
    ::mount("nodev", "/sys/kernel/tracing", "tracefs", 0, nullptr);  // tracepoints need tracefs
}

// uprobe_multi links came with Linux 6.6. Older kernels load only the single-uprobe programs.
bool kernel_has_uprobe_multi() {
  utsname u{};
  int major = 0, minor = 0;
  if (::uname(&u) != 0 || std::sscanf(u.release, "%d.%d", &major, &minor) != 2) return false;
  return major > 6 || (major == 6 && minor >= 6);
}

}  // namespace

bool is_traced_layer(Layer layer) {
  return layer == Layer::cuda || layer == Layer::nccl || layer == Layer::torch || layer == Layer::python;
}

std::unique_ptr<Collector> make_uprobe_tracer(std::vector<Layer> layers, TracerOptions options) {
  return std::make_unique<UprobeTracer>(std::move(layers), std::move(options));
}

UprobeTracer::UprobeTracer(std::vector<Layer> layers, TracerOptions options) : topts_(std::move(options)) {
  for (auto l : layers)
    if (is_traced_layer(l) && !wants(l)) layers_.push_back(l);
  specs_ = builtin_call_specs();
  for (auto& s : topts_.python_capi_symbols) specs_.push_back(python_capi_spec(s));
}

UprobeTracer::~UprobeTracer() { release(); }

bool UprobeTracer::wants(Layer l) const {
  for (auto x : layers_)
    if (x == l) return true;
  return false;
}

CollectorStatus UprobeTracer::start(TelemetrySink& sink, const CollectorOptions& options) {
  if (started_) return {true, "already running"};
  if (layers_.empty()) return {false, "no traced layer requested (cuda, nccl, torch, python)"};
  if (::geteuid() != 0) return {false, "needs root (CAP_BPF and CAP_PERFMON) to load eBPF programs"};
  sink_ = &sink;
  copts_ = options;
  g_libbpf_verbose = topts_.verbose;
  libbpf_set_print(libbpf_print);
  prepare_system();

  std::string err;
  auto fail = [&](const std::string& what) {
    std::string msg = what + ": " + err;
    release();
    return CollectorStatus{false, msg};
  };
  uint32_t rb = topts_.ringbuf_bytes;
  const bool multi = topts_.uprobe_multi && kernel_has_uprobe_multi();
  // Loads a family into its slot; its typed pointer, or null (err says why).
  auto load = [&](int f, auto made, uint32_t ring_bytes) -> decltype(made.get()) {
    err = made->load(ring_bytes, multi);
    if (!err.empty()) return nullptr;
    auto* loaded = made.get();
    families_[static_cast<size_t>(f)] = std::move(made);
    return loaded;
  };
  if (wants(Layer::cuda) && !(cuda_ = load(kCuda, std::make_unique<CudaProbes>(), rb))) return fail("cuda BPF");
  if (wants(Layer::nccl) && !load(kNccl, std::make_unique<NcclProbes>(), std::max(rb / 4, 65536u)))
    return fail("nccl BPF");
  if (wants(Layer::torch) &&
      !(torch_ = load(kTorch, std::make_unique<TorchProbes>(!topts_.full_detail, options.torch_ops), rb)))
    return fail("torch BPF");
  if (wants(Layer::python) && (topts_.python_mode == "stack" || topts_.python_mode == "auto") &&
      !(pystack_ = load(kPyStack,
                        std::make_unique<PyStackProbes>(topts_.python_mode, topts_.python_sample_hz,
                                                        topts_.python_offcpu_min_ns),
                        rb)))
    return fail("python stack BPF");
  if (wants(Layer::python) && topts_.python_mode != "off" && topts_.python_mode != "stack" &&
      !load(kPython,
            std::make_unique<PythonProbes>(topts_.python_min_duration_ns, topts_.python_mode, duty_cycled()), rb))
    return fail("python BPF");
  if (!(proc_ = load(kProc, std::make_unique<ProcProbes>(options.all_processes, options.follow_children), 256u << 10)))
    return fail("proc BPF");
  // Lifecycle tracepoints; the mmap ones need syscall tracepoints (CONFIG_FTRACE_SYSCALLS): rescans cover them.
  if (!proc_->attach_lifecycle(&err, [&](const std::string& text) { sink.add_note("trace", text); }))
    return fail("process tracepoints");

  auto add_ring = [&](bpf_map* map, Layer layer) -> bool {
    ring_ctx_.push_back(std::make_unique<RingCtx>(RingCtx{this, layer}));
    if (!rb_) {
      rb_ = ring_buffer__new(bpf_map__fd(map), on_record, ring_ctx_.back().get(), nullptr);
      return rb_ != nullptr;
    }
    return ring_buffer__add(rb_, bpf_map__fd(map), on_record, ring_ctx_.back().get()) == 0;
  };
  bool ok = add_ring(proc_->events(), proc_->layer());  // process records first
  for (int f = 0; f < kFamilies; ++f)
    if (ProbeFamily* fam = family(f); fam && f != kProc) ok = ok && add_ring(fam->events(), fam->layer());
  if (!ok) {
    err = std::strerror(errno);
    return fail("ring buffer");
  }

  decoder_ = std::make_unique<RecordDecoder>(specs_, [this](uint32_t pid, uint64_t a) { return kernel_name(pid, a); });
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto pid : options.pids) {
      traced_.insert(pid);
      pending_rescan_.insert(pid);
    }
  }
  for (auto pid : options.pids) proc_->trace_pid(pid);
  if (options.all_processes)
    for (auto pid : list_pids()) pending_rescan_.insert(pid);
  use_multi_ = multi;
  if (!kernel_has_uprobe_multi()) sink.add_note("trace", "kernel older than 6.6: no uprobe_multi links, one uprobe per probe "
                                          "(attaching and detaching take one kernel call each)");
  start_ns_ = budget_mark_ns_ = monotonic_ns();
  if (budgeted()) measure_hit_cost();
  {
    std::lock_guard<std::mutex> lock(gate_mu_);
    auto now = std::chrono::steady_clock::now();
    for (int f = 0; f < kUprobeFamilies; ++f) {
      auto& g = gates_[static_cast<size_t>(f)];
      g.on_since_ns = start_ns_;
      g.next_toggle = g.window_start = now;
      if (!counters_of(f) || !progs_of(f).entry) continue;  // not loaded
      g.hits_prev = g.window_mark = read_counter(counters_of(f), SS_CNT_HITS);
      if (f == kPython && duty_cycled()) {
        g.fixed = g.cycling = g.ever_cycled = true;
        g.on = false;  // the first window opens at once
        g.on_ms = topts_.python_duty_on_ms;
        g.period_ms = topts_.python_duty_period_ms;
        g.fraction = static_cast<double>(g.on_ms) / g.period_ms;
        g.watching_name = "python.capi.watching";
        *capture_flag_of(f) = 0;
      } else if (budgeted()) {
        g.watching_name = fmt::format("trace.{}.watching", family_name(f));
        // Its operators' counts are the estimated ones; every probe has a return to leave out (sampled_count.h).
        g.calibrate = f == kTorch;
      }
      if (g.fixed) add_watching_series(f);  // the budget's are added with the family's first probes
    }
  }
  if (family(kPython) && duty_cycled())
    sink.add_note("trace", fmt::format("python C-API probes duty-cycled: attached {} ms of every {} ms; calls are "
                                       "recorded only while python.capi.watching is 1, so divide counts by the "
                                       "watched time, not the run time", topts_.python_duty_on_ms,
                                       topts_.python_duty_period_ms));
  if (budgeted())
    sink.add_note("trace", fmt::format("cost budget {}% of the job's CPU time at {:.0f} ns per probe hit: a probe "
                                       "family above it is attached for a share of every {} ms or longer (its attach/detach toggles are priced too) "
                                       "(trace.<family>.watching is 1 while attached)", topts_.budget_pct,
                                       hit_cost_ns_, topts_.budget_period_ms));
  started_ = true;
  stopping_ = false;
  poller_ = std::thread([this] {
    name_this_thread("ss-uprobe-poll");
    poll_loop();
  });
  maintainer_ = std::thread([this] {
    name_this_thread("ss-uprobe-scan");
    maintain_loop();
  });
  control_ = std::thread([this] {
    name_this_thread("ss-uprobe-gate");
    control_loop();
  });
  std::string layers;
  for (auto l : layers_) layers += (layers.empty() ? "" : ",") + std::string(layer_name(l));
  return {true, "tracing " + layers + (options.all_processes ? " in all processes" : "")};
}

void UprobeTracer::add_pid(uint32_t pid) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!copts_.all_processes) copts_.pids.push_back(pid);
  traced_.insert(pid);
  if (proc_) proc_->trace_pid(pid);
  pending_rescan_.insert(pid);
  cv_.notify_all();
}

void UprobeTracer::stop() {
  if (!started_) return;
  {  // under mu_: the maintainer and duty threads test stopping_ in cv_'s predicate, so no wakeup is lost
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (control_.joinable()) control_.join();
  if (torch_ && !topts_.full_detail) torch_->sample_ops(*sink_, copts_.host);  // the last interval's operators
  {
    std::lock_guard<std::mutex> lock(gate_mu_);
    const int64_t end = monotonic_ns();
    for (int f = 0; f < kUprobeFamilies; ++f) {
      auto& g = gates_[static_cast<size_t>(f)];
      if (g.on) set_watching(f, false);
      if (!g.ever_cycled) continue;
      const int64_t since = g.first_ns ? g.first_ns : start_ns_;
      const double watched = end > since ? static_cast<double>(g.watched_ns) / static_cast<double>(end - since) : 0;
      // Each period's count is its window's rate times the period: with per-window errors of variance s2
      // (estimated from consecutive windows), the total's relative error is 2 sqrt(n s2) / sum of rates.
      double err = 0;
      if (g.windows >= 2 && g.rate_sum > 0) {
        const double n = static_cast<double>(g.windows), s2 = g.rate_ssd / (2 * (n - 1));
        err = 2 * std::sqrt(n * s2) / g.rate_sum;
      }
      sink_->add_note("trace", fmt::format(
          "{}: probes watched {:.1f}% of the recording since they were first attached ({} window(s), {}; attach {:.1f} ms, detach {:.1f} ms per "
          "window; last period {} ms; {:.0f} probe hits per attach/detach cycle outside the watched windows, "
          "{:.2f} ms of CPU each at the budget's price): its events and series cover only the time {} is 1; scale "
          "counts by {:.4g} (sampling fraction {:.4f}, error of the scaled counts about {:.0f}% from the spread of "
          "per-window rates)",
          family_name(f), 100 * watched, g.windows, g.fixed ? "fixed duty cycle" : "cost budget",
          // per attachment and per detachment (entry-only windows too), not per counted window
          g.attaches ? g.attach_ns / 1e6 / static_cast<double>(g.attaches) : 0.0,
          g.cycles ? g.detach_ns / 1e6 / static_cast<double>(g.cycles) : 0.0, g.period_ms,
          g.cycles ? static_cast<double>(g.off_hits) / static_cast<double>(g.cycles) : 0.0, 1e3 * g.cycle_cost_s,
          g.watching_name, watched > 0 ? 1 / watched : 0.0, watched, 100 * err));
      if (g.restricted.windows || !g.found_late.empty()) {  // the windows that held the hit set only (torch)
        size_t all_sites = g.full_set.max_sites;  // the sets of a process that exited are gone by now
        for (size_t now = 0; auto& set : g.sets)
          if (!set.steady) all_sites = std::max(all_sites, now += set.offsets.size());
        auto per = [](int64_t ns, uint64_t n) { return n ? static_cast<double>(ns) / 1e6 / static_cast<double>(n) : 0.0; };
        auto sites = [](const ProbeGate::WindowSites& w) {
          return !w.windows || w.min_sites == w.max_sites ? fmt::format("{}", w.max_sites)
                                            : fmt::format("{}-{}", w.min_sites, w.max_sites);
        };
        std::string late;
        for (size_t i = 0; i < g.found_late.size() && i < 10; ++i)
          late += fmt::format("{}{} at {:.1f} s", i ? ", " : "",
                              torch_ && f == kTorch ? torch_->op_name(static_cast<uint32_t>(g.found_late[i].first))
                                                    : fmt::format("#{}", g.found_late[i].first),
                              static_cast<double>(g.found_late[i].second - start_ns_) / 1e9);
        if (g.found_late.size() > 10) late += fmt::format(" and {} more", g.found_late.size() - 10);
        sink_->add_note("trace", fmt::format(
            "{}: windows after the first detach attach only the probe sites of the operators counted so far (the hit "
            "set: {} operator(s) of the {} sites probed now): {} such window(s) held {} site(s) each (attach {:.1f} "
            "ms, detach {:.1f} ms, {:.0f} probe hits while attaching and detaching, a window); every {}th window "
            "holds every site, to find operators first called later: {} window(s) of {} site(s) (attach {:.1f} ms, "
            "detach {:.1f} ms, {:.0f} probe hits while attaching and detaching, a window); {} operator(s) found by "
            "them{}{}; the first detach (every site) took {:.1f} ms, {} probe hits; of the full-set windows' hits "
            "while toggling, {:.0f} a window while the sites outside the hit set went in and out",
            family_name(f), g.hit_cookies.size(), all_sites, g.restricted.windows, sites(g.restricted),
            per(g.restricted.attach_ns, g.restricted.windows), per(g.restricted.detach_ns, g.restricted.windows),
            1e6 * per(static_cast<int64_t>(g.restricted.toggle_hits), g.restricted.windows), kFullSetEvery,
            g.full_set.windows, sites(g.full_set), per(g.full_set.attach_ns, g.full_set.windows),
            per(g.full_set.detach_ns, g.full_set.windows),
            1e6 * per(static_cast<int64_t>(g.full_set.toggle_hits), g.full_set.windows), g.found_late.size(),
            late.empty() ? "" : ": " + late,
            late.empty() ? ""
                         : " (each counted only from the window that found it: its calls before were neither counted "
                           "nor estimated, so its scaled count is low by up to their share)",
            static_cast<double>(g.first_detach_ns) / 1e6, g.first_detach_hits,
            1e6 * per(static_cast<int64_t>(g.full_set.cold_hits), g.full_set.windows)));
      }
      // The whole-recording factor assumes one rate throughout; a family attached at import and hot only later was
      // watched far less once cycled than that factor says (tiny-operator loop: 20-30% against 0.5-3%).
      // Spells fully attached again after the family went quiet (the job idle, exited, or starved of CPU: the
      // budget re-attaches a family that costs little) are left out of the share: counted whole, they would make it look watched more
      // (the tiny-operator test: 8.7-16 % against 5.4-6.8 % from the watching series over the loop).
      if (g.uncycled_since_ns) g.uncycled_ns += end - std::exchange(g.uncycled_since_ns, 0);
      if (g.cycling_since_ns && end > g.cycling_since_ns + g.uncycled_ns) {
        const int64_t watched_after = g.watched_ns - std::min(g.watched_ns, g.watched_before_cycling_ns);
        const double cycled = static_cast<double>(std::max<int64_t>(0, watched_after - g.uncycled_ns)) /
                              static_cast<double>(end - g.cycling_since_ns - g.uncycled_ns);
        sink_->add_note("trace", fmt::format(
            "{}: fully attached (every call counted) for the first {:.1f} s of the recording, then duty-cycled for "
            "{:.1f} s and watched {:.2f}% of that time (and fully attached again for {:.1f} s, while its calls had "
            "stopped or slowed under the budget's threshold); by watched time, counts made after the first {:.1f} s "
            "scale by {:.4g}",
            family_name(f), static_cast<double>(g.cycling_since_ns - start_ns_) / 1e9,
            static_cast<double>(end - g.cycling_since_ns - g.uncycled_ns) / 1e9, 100 * cycled,
            static_cast<double>(g.uncycled_ns) / 1e9, static_cast<double>(g.cycling_since_ns - start_ns_) / 1e9,
            cycled > 0 ? 1 / cycled : 0.0));
      }
      if (g.spans_open) {  // the estimate from the synchronisations or the job's CPU time (model/sampled_count.h)
        end_span(f, SampledSpanKind::unwatched, end);
        // The entry-only windows' share of the calls: by the operators their probes held (torch's op ids), from every
        // call counted; elsewhere every call, and the subset windows say nothing.
        std::vector<SampledSpan> spans = g.spans;
        double shares[2] = {0, 0}, windows[2] = {0, 0};  // entry_only, entry_subset: mean share
        for (size_t i = 0; i < spans.size(); ++i) {
          const bool second = spans[i].kind == SampledSpanKind::entry_subset;
          if (spans[i].kind != SampledSpanKind::entry_only && !second) continue;
          const uint32_t mod = i < g.span_cookie_mods.size() ? g.span_cookie_mods[i] : 1;
          if (f == kTorch && torch_) spans[i].share = torch_->share_of_ops_divisible_by(mod);
          shares[second] += spans[i].share >= 0 ? spans[i].share : second ? 0 : 1;
          ++windows[second];
        }
        for (int k = 0; k < 2; ++k) shares[k] = windows[k] > 0 ? shares[k] / windows[k] : 0;
        const SampledCallsReport r = estimate_sampled_calls(spans);
        const SampledCountEstimate& e = r.cpu;
        const SyncIntervalEstimate& y = r.syncs;
        const std::string cpu_how =
            e.from_cpu ? fmt::format("from the job's CPU time: {:.2f} us of CPU a call, {:.2f} us a probe trap, "
                                     "{:.2f} ms a window, fitted over its {} entry-only windows ({}; {:.0f}% and "
                                     "{:.0f}% of the calls trapped in their two kinds)",
                                     e.cpu_per_call_ns / 1e3, e.trap_ns / 1e3, e.window_cost_ns / 1e6, e.windows,
                                     e.entry_traps_only ? "entry traps only" : "every window, traps alike",
                                     100 * shares[0], 100 * shares[1])
                       : fmt::format("from watched wall time ({}) over {} windows", e.why_wall, e.windows);
        const std::string syncs_how = fmt::format(
            "from the blocking CUDA synchronisations: {:.1f} calls per interval between two, over {} intervals in {} "
            "counted windows (spread {:.0f}%, {:.0f}% of the calls by processes that synchronised), times {:.0f} "
            "synchronisations unwatched; the counted calls {:+.1f}% against calls per interval x the {:.0f} "
            "synchronisations in the counted windows{}",
            y.calls_per_interval, y.intervals, y.windows, 100 * y.spread, 100 * y.coverage, y.unwatched_syncs,
            100 * y.unaccounted, y.counted_syncs,
            y.unaccounted_in_error ? " (stretches whose calls do not follow the synchronisations: added to the error)"
                                   : "");
        // The factors are for the counts a reader scales, the operators' series since the first detach: their
        // calls (the returns of calls entered while counting) rather than the counted windows' probe hits over two,
        // which also count halves of the calls cut at a window's edges (0.06 % apart on the CPU VM).
        const double hits_counted = r.from_syncs ? y.counted_calls : e.counted_calls;
        double series_counted = hits_counted;
        if (f == kTorch && torch_ && g.ops_at_first_detach >= 0) {
          const double since = static_cast<double>(torch_->calls_in_series()) -
                               static_cast<double>(g.ops_at_first_detach);
          if (since > 0) series_counted = since;
        }
        auto factor = [&](double entry_only, double unwatched) {  // (counted + entry-only + unwatched) / counted
          return (series_counted + entry_only + unwatched) / series_counted;
        };
        // The estimate not used, with its figures: what the GPU benchmarks compare.
        std::string other = fmt::format("the synchronisations' estimate not used: {}", y.why_not);
        if (r.from_syncs)
          other = fmt::format("the job's CPU time would say {:.4g} (error about {:.0f}%; {})",
                              factor(e.entry_only_calls, e.unwatched_calls), 100 * e.error, cpu_how);
        else if (y.windows > 0)
          other = fmt::format("the synchronisations would say {:.4g} (error about {:.0f}%; {}), not used: {}",
                              factor(y.entry_only_calls, y.unwatched_calls), 100 * y.error, syncs_how, y.why_not);
        sink_->add_note("trace", fmt::format(
            "{}: estimated calls: counts made after the first detach, {:.3f} s into the recording, scale by {:.4g} "
            "(error about {:.0f}%, 95 %, jackknife over blocks of four windows; estimator: {}; {}); {}; scaling by "
            "watched wall time would say {:.4g}; {:.0f} calls counted, {:.0f} in entry-only windows, {:.0f} estimated "
            "unwatched (counted: the operators' series since the first detach; the counted windows' probe hits over "
            "two say {:.0f})",
            family_name(f), static_cast<double>(g.spans_since_ns - start_ns_) / 1e9,
            r.from_syncs ? factor(y.entry_only_calls, y.unwatched_calls) : factor(e.entry_only_calls, e.unwatched_calls),
            100 * r.error(), r.from_syncs ? "syncs" : e.from_cpu ? "cpu" : "wall", r.from_syncs ? syncs_how : cpu_how,
            other, e.wall_scale, series_counted, e.entry_only_calls, r.from_syncs ? y.unwatched_calls : e.unwatched_calls,
            hits_counted));
      }
    }
  }
  if (poller_.joinable()) poller_.join();
  if (maintainer_.joinable()) maintainer_.join();
  if (rb_) ring_buffer__consume(rb_);  // what is still buffered
  report_counters(true);
  report_program_runs();
  if (pystack_)  // the sampler's own cost, where kernel.bpf_stats_enabled was on
    if (std::string cost = pystack_->cost(); !cost.empty())
      sink_->add_note("trace", "python stack sampler BPF cost (kernel.bpf_stats_enabled): " + cost);
  started_ = false;
}

void UprobeTracer::release(const std::function<void(size_t done, size_t total)>& progress) {
  stop();
  std::vector<bpf_link*> links;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [pid, v] : links_) links.insert(links.end(), v.begin(), v.end());
    links_.clear();
    links.insert(links.end(), exited_links_.begin(), exited_links_.end());
    exited_links_.clear();
    attached_.clear();
  }
  {
    std::lock_guard<std::mutex> lock(gate_mu_);
    for (auto& g : gates_) {
      for (auto& set : g.sets)  // entries before returns, as detach_set does
        links.insert(links.end(), set.links.rbegin(), set.links.rend());
      g.sets.clear();
    }
  }
  for (ProbeFamily* f : std::initializer_list<ProbeFamily*>{pystack_, proc_})
    if (f) {  // the sampler's and the lifecycle tracepoints' too: each detach waits for the kernel
      auto more = f == proc_ ? proc_->take_links() : pystack_->take_links();
      links.insert(links.end(), more.begin(), more.end());
    }
  destroy_links(links, progress);
  if (rb_) ring_buffer__free(rb_);
  rb_ = nullptr;
  ring_ctx_.clear();
  {  // unloading a family also waits for the kernel: all at once
    std::vector<std::thread> unload;
    for (int f = 0; f < kFamilies; ++f)
      if (ProbeFamily* fam = family(f)) unload.emplace_back([fam] { fam->destroy(); });
    for (auto& t : unload) t.join();
  }
  cuda_ = nullptr;
  torch_ = nullptr;
  proc_ = nullptr;
  pystack_ = nullptr;
  for (auto& fam : families_) fam.reset();
}

// Destroying a link waits for the kernel's RCU grace periods (~50-100 ms for a uprobe_multi link here); links are
// destroyed from several threads so those waits overlap: a few dozen links still take about one wait.
void UprobeTracer::destroy_links(const std::vector<bpf_link*>& links,
                                 const std::function<void(size_t done, size_t total)>& progress) {
  std::atomic<size_t> next{0}, done{0};
  auto work = [&] {
    for (size_t i; (i = next++) < links.size(); ++done) bpf_link__destroy(links[i]);
  };
  std::vector<std::thread> threads;
  for (size_t i = 1; i < std::min<size_t>(links.size(), 16); ++i) threads.emplace_back(work);
  if (progress && !links.empty()) progress(0, links.size());
  work();
  for (auto& t : threads) t.join();
  if (progress && !links.empty()) progress(links.size(), links.size());
}

int UprobeTracer::on_record(void* ctx, void* data, size_t size) {
  auto* c = static_cast<RingCtx*>(ctx);
  c->self->handle_record(c->layer, data, size);
  return 0;
}

void UprobeTracer::handle_record(Layer, const void* data, size_t size) {
  if (size < sizeof(uint32_t)) return;
  uint32_t kind;
  std::memcpy(&kind, data, sizeof kind);
  switch (kind) {
    case SS_REC_CALL:
      if (size >= sizeof(ss_call_record))
        if (auto e = decoder_->decode_call(*static_cast<const ss_call_record*>(data))) {
          sink_->append_event(std::move(*e));
          ++events_;
        }
      break;
    case SS_REC_TORCH:
      if (size >= sizeof(ss_torch_record)) {
        auto& r = *static_cast<const ss_torch_record*>(data);
        sink_->append_event(decoder_->decode_torch(r, torch_ ? torch_->op_name(r.op_id) : std::string()));
        ++events_;
      }
      break;
    case SS_REC_PYTHON:
      if (size >= sizeof(ss_python_record)) {
        sink_->append_event(decoder_->decode_python(*static_cast<const ss_python_record*>(data)));
        ++events_;
      }
      break;
    case SS_REC_PYCODE:
      if (size >= sizeof(ss_pycode_record)) decoder_->note_pycode(*static_cast<const ss_pycode_record*>(data));
      break;
    case SS_REC_PYSTACK:
      if (size >= sizeof(ss_pystack_record)) {
        sink_->append_event(decoder_->decode_pystack(*static_cast<const ss_pystack_record*>(data)));
        ++events_;
      }
      break;
    case SS_REC_PROC:
      if (size >= sizeof(ss_proc_record)) {
        auto& r = *static_cast<const ss_proc_record*>(data);
        std::lock_guard<std::mutex> lock(mu_);
        if (r.event == SS_PROC_EXEC && pystack_) pystack_->forget(r.pid, false);  // a new image: found again
        if (r.event == SS_PROC_EXIT) {
          pending_exit_.insert(r.pid);
        } else if (r.event == SS_PROC_FORK && copts_.all_processes) {
          // --all: probes are per file, so a child that maps nothing new needs no work.
        } else {
          if (r.event == SS_PROC_FORK) traced_.insert(r.pid);
          pending_rescan_.insert(r.pid);
        }
        cv_.notify_all();
      }
      break;
    default:
      break;
  }
}

// Call, operator and stack records wake nobody until their buffer is a quarter full (ss_submit_flags in
// bpf/family_maps.bpf.h, bpf/pystack.bpf.c): they are drained every 20 ms; process records still wake the poller.
void UprobeTracer::poll_loop() {
  while (!stopping_) {
    int n = ring_buffer__poll(rb_, 20);
    if (n < 0 && n != -EINTR) break;
    ring_buffer__consume(rb_);
  }
}

void UprobeTracer::maintain_loop() {
  auto next_periodic = std::chrono::steady_clock::now();
  while (!stopping_) {
    std::set<uint32_t> rescans, exits;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_until(lock, next_periodic, [&] { return stopping_ || !pending_rescan_.empty() || !pending_exit_.empty(); });
      if (stopping_) break;
      if (std::chrono::steady_clock::now() >= next_periodic) {
        // Safety net for lost proc records and libraries mapped without a traced mmap (dlopen).
        if (copts_.all_processes) {
          for (auto pid : list_pids()) pending_rescan_.insert(pid);
        } else {
          pending_rescan_.insert(traced_.begin(), traced_.end());
        }
        next_periodic = std::chrono::steady_clock::now() + std::chrono::milliseconds(topts_.rescan_interval_ms);
      }
      rescans.swap(pending_rescan_);
      exits.swap(pending_exit_);
    }
    for (auto pid : exits) process_exited(pid);
    for (auto pid : rescans) {
      if (stopping_) break;
      rescan(pid);
    }
    report_counters(false);
  }
}

void UprobeTracer::process_exited(uint32_t pid) {
  std::vector<bpf_link*> links;
  {
    std::lock_guard<std::mutex> lock(mu_);
    traced_.erase(pid);
    identified_.erase(pid);
    const int64_t now = monotonic_ns();
    if (auto it = last_maps_.find(pid); it != last_maps_.end()) it->second.second = now;
    std::erase_if(last_maps_, [&](const auto& kv) { return kv.second.second && now - kv.second.second > 5'000'000'000; });
    if (pystack_) pystack_->forget(pid, true);
    if (copts_.all_processes) return;
    if (auto it = links_.find(static_cast<int>(pid)); it != links_.end()) {
      links.swap(it->second);
      links_.erase(it);
    }
    for (auto it = attached_.begin(); it != attached_.end();)
      it = std::get<0>(*it) == static_cast<int>(pid) ? attached_.erase(it) : std::next(it);
    known_libs_.erase(static_cast<int>(pid));
    attached_layers_.erase(static_cast<int>(pid));
  }
  if (cuda_) cuda_->forget(pid);
  {
    std::lock_guard<std::mutex> lock(gate_mu_);
    for (auto& g : gates_)
      std::erase_if(g.sets, [&](ProbeSet& set) {
        if (set.pid_filter != static_cast<int>(pid)) return false;
        links.insert(links.end(), set.links.rbegin(), set.links.rend());
        return true;
      });
  }
  // A dead process's probes are freed here, unless the recording is ending: then release() frees them after the
  // recording is closed (the traced command exiting is what usually ends it).
  for (size_t i = 0; i < links.size(); ++i) {
    if (stopping_) {
      std::lock_guard<std::mutex> lock(mu_);
      exited_links_.insert(exited_links_.end(), links.begin() + static_cast<ptrdiff_t>(i), links.end());
      break;
    }
    bpf_link__destroy(links[i]);
  }
}

void UprobeTracer::rescan(uint32_t pid) {
  int filter = copts_.all_processes ? -1 : static_cast<int>(pid);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!copts_.all_processes && !traced_.count(pid)) return;
  }
  auto maps = read_proc_maps(pid);
  if (maps.empty()) return;  // gone (its exit record follows) or a kernel thread
  note_rank_environment(pid);
  if (cuda_) cuda_->update_fold_ranges(pid, maps);
  const auto libs = find_libraries(pid, maps);
  if (cuda_ && std::any_of(libs.begin(), libs.end(), [](const MappedLibrary& l) {
        return l.kind == LibraryKind::cudart || l.kind == LibraryKind::cuda_driver;
      })) {  // only where launches are named (with --all every process is scanned)
    std::lock_guard<std::mutex> lock(mu_);
    last_maps_[pid] = {maps, 0};
  }
  unsigned layers = 0;
  for (auto& lib : libs) {
    if (lib.kind == LibraryKind::python && pystack_) {
      // Sampled per process (the interpreter's address differs in each); probes are not attached for it then.
      if (unsigned bit = register_python_stack(pid, maps, lib)) {
        layers |= bit;
        continue;
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!known_libs_[filter].insert({lib.dev, lib.inode}).second) continue;
    }
    std::shared_ptr<ElfImage> img;
    try {
      img = elf_cache_.get(lib.host_path);
    } catch (const std::exception& e) {
      sink_->add_note("trace", fmt::format("pid {}: {}", pid, e.what()));
      continue;
    }
    layers |= attach_library(filter, lib, img);
  }
  // Published once the whole scan is done: a waiter sees every library of the layer attached, not the first.
  if (layers) {
    std::lock_guard<std::mutex> lock(mu_);
    attached_layers_[filter] |= layers;
    cv_.notify_all();
  }
}

// A worker's rank as its launcher set it (torchrun's RANK, LOCAL_RANK...), once per process: what lets
// `stragglers` name workers by rank when no NCCL call says it (gloo, CPU jobs). After exec, since the
// environment read is the one the process started with (a child seen between fork and exec still has its
// parent's: noted again when it changes).
void UprobeTracer::note_rank_environment(uint32_t pid) {
  const std::string env = process_rank_environment(pid);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, fresh] = identified_.try_emplace(pid, env);
    if (!fresh && it->second == env) return;
    it->second = env;
  }
  if (!env.empty()) sink_->add_note("process", fmt::format("pid {}: {}", pid, env));
}

const char* UprobeTracer::family_name(int f) const { return family(f) ? family(f)->name() : "?"; }

FamilyProgs UprobeTracer::progs_of(int f) const { return family(f) ? family(f)->progs() : FamilyProgs{}; }
const bpf_map* UprobeTracer::counters_of(int f) const { return family(f) ? family(f)->counters() : nullptr; }
uint32_t* UprobeTracer::capture_flag_of(int f) const { return family(f) ? family(f)->capture_flag() : nullptr; }
bpf_map* UprobeTracer::thread_map_of(int f) const { return family(f) ? family(f)->thread_map() : nullptr; }

unsigned UprobeTracer::attach_library(int pid_filter, const MappedLibrary& lib,
                                      const std::shared_ptr<ElfImage>& img) {
  // One probe per address (aliases: weak nccl* and pnccl*, versioned names), entry-only where the cookie says so.
  auto make_set = [&](const std::vector<Probe>& probes, bool steady) {
    ProbeSet set;
    set.pid_filter = pid_filter;
    set.host_path = lib.host_path;
    set.steady = steady;
    std::set<uint64_t> seen;
    for (auto& [offset, cookie] : probes) {
      if (!seen.insert(offset).second) continue;
      set.offsets.push_back(offset);
      set.cookies.push_back(cookie);
      if (!(cookie & SS_COOKIE_ENTRY_ONLY)) {
        set.ret_offsets.push_back(offset);
        set.ret_cookies.push_back(cookie);
      }
    }
    return set;
  };
  ProbeContext ctx;
  ctx.specs = &specs_;
  ctx.full_detail = topts_.full_detail;
  ctx.budgeted = budgeted();
  ctx.note_once = [this](const std::string& text) { note_once(text); };
  // Probes beside the owner's (the torch family's on the CUDA runtime's synchronisations): steady, unwatched.
  for (int f = 0; f < kUprobeFamilies; ++f)
    if (ProbeFamily* fam = family(f))
      if (auto beside = fam->probes_beside(lib, *img, ctx); !beside.empty())
        add_probe_set(f, make_set(beside, true), /*watched=*/false);
  // Each library kind is one family's: the first that finds probes in it takes it.
  for (int f = 0; f < kUprobeFamilies; ++f) {
    ProbeFamily* fam = family(f);
    if (!fam) continue;
    LibraryProbes found = fam->probes_for(lib, *img, ctx);
    const unsigned bit = 1u << static_cast<unsigned>(fam->layer());
    if (found.usdt) return attach_usdt(f, pid_filter, lib) ? bit : 0u;
    if (found.probes.empty()) continue;
    // Steady probes (blocking calls of a budgeted family) are their own set, outside the duty cycle.
    std::vector<Probe> steady, cycled;
    for (auto& p : found.probes) ((p.second & SS_COOKIE_STEADY) ? steady : cycled).push_back(p);
    bool added = false;
    if (!steady.empty()) added |= add_probe_set(f, make_set(steady, true));
    if (!cycled.empty()) added |= add_probe_set(f, make_set(cycled, false));
    return added ? bit : 0u;
  }
  return 0;
}

bool UprobeTracer::attach_usdt(int f, int pid_filter, const MappedLibrary& lib) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!attached_.insert({pid_filter, lib.dev, lib.inode, 0, f}).second) return false;
    if (family(f)->attach_usdt(pid_filter, lib.host_path, links_[pid_filter])) return true;
    attached_.erase({pid_filter, lib.dev, lib.inode, 0, f});
  }
  const int e = errno;
  note_once(fmt::format("{}: {} USDT probes failed to attach (pid filter {}): {}", lib.path, family_name(f),
                        pid_filter, std::strerror(e)));  // note_once takes mu_: not held here
  return false;
}

void UprobeTracer::note_once(const std::string& text) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!notes_sent_.insert(text).second) return;
  }
  sink_->add_note("trace", text);
}

unsigned UprobeTracer::register_python_stack(uint32_t pid, const std::vector<MapEntry>& maps,
                                             const MappedLibrary& lib) {
  if (pystack_->sampled(pid)) return 1u << static_cast<unsigned>(Layer::python);  // before reading its image
  std::shared_ptr<ElfImage> img;
  try {
    img = elf_cache_.get(lib.host_path);
  } catch (const std::exception&) {
    return 0;  // the probe path says why
  }
  const bool sampled =
      pystack_->register_process(pid, maps, lib, *img, [this](const std::string& t) { note_once(t); });
  return sampled ? 1u << static_cast<unsigned>(Layer::python) : 0u;
}

bool UprobeTracer::wait_until_attached(uint32_t pid, Layer layer, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  unsigned bit = 1u << static_cast<unsigned>(layer);
  return cv_.wait_for(lock, timeout, [&] {
    auto it = attached_layers_.find(copts_.all_processes ? -1 : static_cast<int>(pid));
    return it != attached_layers_.end() && (it->second & bit);
  });
}

std::vector<uint32_t> UprobeTracer::traced_pids() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {traced_.begin(), traced_.end()};
}

UprobeTracer::Stats UprobeTracer::stats() const {
  Stats s;
  s.events = events_;
  for (int f = 0; f < kFamilies; ++f) {
    const bpf_map* m = counters_of(f);
    s.lost += read_counter(m, SS_CNT_RB_FULL);
    s.nested += read_counter(m, SS_CNT_NESTED);
    s.unmatched += read_counter(m, SS_CNT_UNMATCHED);
    if (f < kUprobeFamilies) {
      s.hits += read_counter(m, SS_CNT_HITS) + read_counter(m, SS_CNT_STEADY_HITS);
      s.gated += read_counter(m, SS_CNT_GATED);
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [pid, v] : links_) s.links += v.size();
  }
  std::lock_guard<std::mutex> lock(gate_mu_);
  for (auto& g : gates_)
    for (auto& set : g.sets) s.links += set.links.size();
  s.uprobe_multi = use_multi_;
  return s;
}

void UprobeTracer::report_counters(bool final_report) {
  std::array<const bpf_map*, kFamilies> maps{};
  for (int f = 0; f < kFamilies; ++f) maps[static_cast<size_t>(f)] = counters_of(f);
  for (int f = 0; f < static_cast<int>(std::size(maps)); ++f) {
    if (!maps[f]) continue;
    uint64_t lost = read_counter(maps[f], SS_CNT_RB_FULL);
    if (lost > lost_reported_[f]) {
      sink_->add_drops(std::string("bpf-") + family_name(f), lost - lost_reported_[f]);
      lost_reported_[f] = lost;
    }
    if (final_report) {
      uint64_t nested = read_counter(maps[f], SS_CNT_NESTED), unmatched = read_counter(maps[f], SS_CNT_UNMATCHED);
      if (nested)
        sink_->add_note("trace", fmt::format("{}: {} driver call(s) folded into the runtime call above them",
                                             family_name(f), nested));
      if (unmatched)
        sink_->add_note("trace", fmt::format("{}: {} return(s) without a matching entry (the call began before its "
                                             "entry probe was attached)", family_name(f), unmatched));
      if (uint64_t deep = read_counter(maps[f], SS_CNT_DEEP))
        sink_->add_note("trace", fmt::format("{}: {} call(s) nested deeper than the calls kept per thread: not "
                                             "reported", family_name(f), deep));
      if (uint64_t no_return = read_counter(maps[f], SS_CNT_NO_RETURN))
        sink_->add_note("trace", fmt::format("{}: {} call(s) not reported: the kernel gave them no return probe (at "
                                             "most 64 may be pending per thread, all probes together; deep Python "
                                             "recursion under --python-mode capi reaches it)", family_name(f),
                                             no_return));
      if (uint64_t stale = read_counter(maps[f], SS_CNT_STALE))
        sink_->add_note("trace", fmt::format("{}: {} call(s) whose return never came (a longjmp or exception "
                                             "skipped it) dropped", family_name(f), stale));
      if (uint64_t unread = read_counter(maps[f], SS_CNT_PY_UNREAD))
        sink_->add_note("trace", fmt::format("{}: {} stack(s) of Python threads could not be read (page not "
                                             "resident, or the interpreter between states)", family_name(f), unread));
    }
  }
}

// Runs of each program that the kernel skipped because another BPF program was running on that CPU (its
// per-CPU recursion guards): a skipped entry or return program loses that call. Where kernel.bpf_stats_enabled
// is on, also how often the probe programs ran: entries against returns.
void UprobeTracer::report_program_runs() {
  std::string misses, runs;
  for (int f = 0; f < kFamilies; ++f) {
    const bpf_object* obj = family(f) ? family(f)->object() : nullptr;
    if (!obj) continue;
    bpf_program* prog = nullptr;
    bpf_object__for_each_program(prog, obj) {
      bpf_prog_info info{};
      uint32_t len = sizeof info;
      if (bpf_program__fd(prog) < 0 || bpf_obj_get_info_by_fd(bpf_program__fd(prog), &info, &len) != 0) continue;
      if (info.recursion_misses)
        misses += fmt::format("{}{}/{}: {}", misses.empty() ? "" : ", ", family_name(f), bpf_program__name(prog),
                              info.recursion_misses);
      if (info.run_cnt && f < kUprobeFamilies)
        runs += fmt::format("{}{}/{}: {}", runs.empty() ? "" : ", ", family_name(f), bpf_program__name(prog),
                            info.run_cnt);
    }
  }
  if (!misses.empty())
    sink_->add_note("trace", "BPF program runs the kernel skipped (another BPF program was running on the CPU): " +
                                 misses);
  if (!runs.empty()) sink_->add_note("trace", "probe program runs (kernel.bpf_stats_enabled): " + runs);
}

std::string UprobeTracer::kernel_name(uint32_t pid, uint64_t address) {
  auto key = std::make_pair(pid, address);
  if (auto it = kernel_names_.find(key); it != kernel_names_.end()) return it->second;
  std::string name;
  auto maps = read_proc_maps(pid);
  bool gone = false;
  if (maps.empty()) {  // exited before its records were drained: its maps as last read, its files by their path
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = last_maps_.find(pid); it != last_maps_.end()) maps = it->second.first;
    gone = true;
  }
  for (auto& m : maps) {
    if (address < m.start || address >= m.end || m.path.empty() || m.path[0] != '/') continue;
    uint64_t file_off = address - m.start + m.offset;
    try {
      auto img = elf_cache_.get(gone ? m.path : "/proc/" + std::to_string(pid) + "/root" + m.path);
      auto vaddr = img->offset_to_vaddr(file_off);
      const ElfSymbol* sym = vaddr ? img->symbol_at(*vaddr) : nullptr;
      if (sym) name = demangle(img->name_of(*sym));
    } catch (const std::exception&) {
    }
    if (name.empty()) {  // stripped: module and offset still tell kernels apart
      auto slash = m.path.rfind('/');
      name = fmt::format("{}+0x{:x}", m.path.substr(slash + 1), file_off);
    }
    break;
  }
  // Cached also when nothing names it (a driver launch's CUfunction is a heap handle, in no file): rereading a
  // large process's maps for every such launch capped the consumer at a few thousand events/s and overflowed the
  // ring buffer. Not cached when the process is gone (no maps): "" -> hex.
  if (!maps.empty() && !gone) kernel_names_.emplace(key, name);
  return name;
}

}  // namespace stackscope::trace
