// The eBPF uprobe tracer: owns one probe family object per BPF program (cuda, nccl, torch, python, python-stack,
// proc), finds the libraries in /proc/PID/maps, attaches per pid (or pid -1 for --all), follows new processes and
// late-loaded libraries, and turns ring-buffer records into Events. It keeps what is common to every family:
// discovery and process lifecycle, the ring buffer, the probe gates and their cost budget (probe_gates.cpp), and the
// sink.
// A family's probes in one library of one process are one uprobe_multi link per program (entry, return), so
// attaching and detaching them is one call each; that makes stopping fast and lets the cost budget duty-cycle a
// hot family (ProbeGate).
//
// Each family is the libbpf-tools trio: bpf/<family>.bpf.c (with the record layouts it shares in bpf/events.h),
// and src/trace/<family>_probes.{h,cpp}, a ProbeFamily (trace/probe_family.h) that opens, configures, loads and
// destroys its skeleton, says which probes a library holds for it (probes_for: the call catalog's symbols, torch
// operators, python USDT or C-API entry points) and holds what only it does (torch operator ids and series, the
// python stack sampler's registration, the CUDA fold ranges). To add a uprobe family:
//   1. bpf/<family>.bpf.c (its skeleton is generated from it: bpf/CMakeLists.txt globs *.bpf.c);
//   2. src/trace/<family>_probes.{h,cpp}: a ProbeFamily subclass with progs(), capture_flag() and thread_map() (so
//      the gates can duty-cycle it), layer() and probes_for();
//   3. uprobe_tracer.{h,cpp}: its index in Family (before kUprobeFamilies) and its load in start().
#pragma once
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "model/collector.h"
#include "model/sampled_count.h"
#include "trace/cuda_probes.h"
#include "trace/elf_symbols.h"
#include "trace/nccl_probes.h"
#include "trace/probe_catalog.h"
#include "trace/probe_family.h"
#include "trace/proc_maps.h"
#include "trace/proc_probes.h"
#include "trace/pystack_probes.h"
#include "trace/python_probes.h"
#include "trace/record_decoder.h"
#include "trace/task_clock.h"
#include "trace/torch_probes.h"
#include "trace/tracer.h"

struct ring_buffer;

namespace stackscope::trace {

class UprobeTracer final : public Collector {
 public:
  UprobeTracer(std::vector<Layer> layers, TracerOptions options);
  ~UprobeTracer() override;

  std::string name() const override { return "uprobe-tracer"; }
  Layer layer() const override { return layers_.empty() ? Layer::cuda : layers_.front(); }
  bool needs_root() const override { return true; }
  CollectorStatus start(TelemetrySink& sink, const CollectorOptions& options) override;
  void add_pid(uint32_t pid) override;
  void stop() override;
  // Detaches the probes (slow: one kernel RCU wait each) and unloads the programs.
  void release(const std::function<void(size_t done, size_t total)>& progress = {}) override;

  // True once probes of `layer` are attached for `pid` (or, with --all, anywhere). For tests and tools.
  bool wait_until_attached(uint32_t pid, Layer layer, std::chrono::milliseconds timeout);
  // Processes traced now (given, or followed through fork); exited ones are gone.
  std::vector<uint32_t> traced_pids() const;
  struct Stats {
    uint64_t events = 0, lost = 0, nested = 0, unmatched = 0;
    // Probe hits of the uprobe families (steady ones included), and those while capture was paused: a
    // duty-cycled family's probes trapping while they were being attached or detached.
    uint64_t hits = 0, gated = 0;
    size_t links = 0;
    bool uprobe_multi = false;  // probes attached as uprobe_multi links (else one link per probe)
  };
  // The share of the time since `layer`'s first probes during which they were attached (1 when never duty-cycled).
  double watched_fraction(Layer layer) const;
  // What one probe hit costs here, as measured at start (or given): the budget's price per hit.
  double hit_cost_ns() const { return hit_cost_ns_; }
  Stats stats() const;

 private:
  struct RingCtx {
    UprobeTracer* self;
    Layer layer;
  };
  static int on_record(void* ctx, void* data, size_t size);
  void handle_record(Layer layer, const void* data, size_t size);
  void poll_loop();
  void maintain_loop();
  void rescan(uint32_t pid);
  void note_rank_environment(uint32_t pid);
  void process_exited(uint32_t pid);
  void destroy_links(const std::vector<bpf_link*>& links, const std::function<void(size_t done, size_t total)>& progress);
  // Asks each loaded uprobe family for its probes in `lib` and attaches them. Returns the bit of the layer it
  // attached probes for (0: none).
  unsigned attach_library(int pid_filter, const MappedLibrary& lib, const std::shared_ptr<ElfImage>& img);
  // A family's USDT probes in `lib`, once per (pid filter, file): kept with the pid filter's links.
  bool attach_usdt(int family, int pid_filter, const MappedLibrary& lib);
  // One family's probes in one library of one process filter.
  struct ProbeSet {
    int pid_filter = -1;
    std::string host_path;
    std::vector<uint64_t> offsets, cookies;          // entry probes
    std::vector<uint64_t> ret_offsets, ret_cookies;  // return probes (not for entry-only calls)
    std::vector<bpf_link*> links;                    // attached now, returns first
    // The first cold_links of links: a full-set window's sites outside the hit set, attached before the others and
    // detached after them, so that the job's calls trap only while the hit set's links go in and out.
    size_t cold_links = 0;
    // Blocking calls of a budgeted family (SS_COOKIE_STEADY): attached from the start to the end, whatever the
    // family's duty cycle does with its other sets.
    bool steady = false;
  };
  // A family's probe sets and whether they are attached: always, or for a share of each period (the cost budget,
  // or --python-duty), with a watching series saying when.
  struct ProbeGate {
    std::vector<ProbeSet> sets;
    bool on = true;        // attached now (a new set is attached at once)
    bool cycling = false;  // duty-cycled
    bool fixed = false;    // duty from the options (python C-API), not from the budget
    bool ever_cycled = false;
    double fraction = 1;   // watched share of each period while cycling
    int on_ms = 0, period_ms = 0;
    std::string watching_name;
    SeriesId watching = 0;
    bool has_watching = false;
    int64_t first_ns = 0;  // when its first probes were added (its watching series starts)
    // When the budget first duty-cycled it, and its watched time until then (fully attached: every call counted).
    int64_t cycling_since_ns = 0, watched_before_cycling_ns = 0;
    // Since then, the time it was fully attached again because its calls had stopped (the job idle or gone).
    int64_t uncycled_ns = 0, uncycled_since_ns = 0;
    int64_t on_since_ns = 0, watched_ns = 0, period_watched_ns = 0;
    uint64_t hits_prev = 0, window_hits0 = 0, steady_hits_prev = 0;
    // Hits outside the watched windows: the probes trapping while their links are attached or detached (a
    // uprobe_multi detach takes 50-400 ms). The budget prices them per attach/detach cycle and lengthens the
    // period until the toggles take at most a quarter of the family's share.
    uint64_t window_mark = 0, period_window_hits = 0, off_hits = 0, cycles = 0;
    int period_cycles = 0;
    double cycle_cost_s = 0;  // CPU seconds of probe hits one cycle costs the job (smoothed)
    double pending_off_s = 0;  // of the cycle in progress
    double full_rate = 0;  // probe hits per second while attached
    uint64_t windows = 0;
    // Per-window hit rates: their sum and the sum of squared differences between consecutive windows, which
    // gives the scaled counts' error without mistaking the job's phases (idle, then busy) for noise.
    double rate_sum = 0, rate_ssd = 0, last_rate = 0;
    int64_t attach_ns = 0, detach_ns = 0;
    uint64_t attaches = 0;  // timed attachments (detachments: cycles)
    std::chrono::steady_clock::time_point next_toggle, window_start;
    // The estimate of its calls from the job's CPU time (model/sampled_count.h). `calibrate`: its counted windows
    // alternate with entry-only ones (one trap a call instead of two), which price a trap in the job itself, and
    // short ones (half on_ms) with long ones (one and a half), which tell a window's own cost from its calls'.
    bool calibrate = false;
    bool entry_only = false;       // the window open now has only its entry probes (no counts, watching stays 0)
    bool subset = false;           // ... and it is the second kind of them (SampledSpanKind::entry_subset)
    uint32_t cookie_mod = 1;       // ... holding the entry probes whose cookie (operator id) it divides only
    uint64_t window_index = 0;     // of the windows since the first detach: kind and length alternate
    // From the first detach on, the spans it timed (windows and the unwatched time between them) and where the
    // span in progress started: time, the traced processes' CPU time (-1: unknown), probe hits.
    bool spans_open = false;
    int64_t spans_since_ns = 0, span_wall0 = 0, span_cpu0 = -1;
    std::vector<uint32_t> span_cookie_mods;  // per span: its window's cookie_mod (1: every probe, or not a window)
    uint64_t span_hits0 = 0;
    int64_t span_syncs0 = -1;  // the torch family's: blocking CUDA synchronisations so far (-1: not counted)
    std::vector<SampledSpan> spans;
    // The torch family's operators' series (their calls summed) when the first window after the first detach opened
    // (-1: not yet): the end note's factor is for what they count from there, the counts a reader scales.
    int64_t ops_at_first_detach = -1;
    // The hit set (torch, budgeted): the cookies (operator ids) counted so far. After the first detach, windows attach
    // only those sites (while a family's links go in and out its hot sites trap the job's calls: 5,557 calls a toggle
    // with the default list's 344 sites against 152-363 with the 4 hit ones on the CPU VM), but every
    // kFullSetEvery-th window attaches every site again (those outside the set as links of their own, cold_links), so
    // that operators first called later join the set.
    std::set<uint64_t> hit_cookies;
    bool hits_only = false;  // the window open now holds only the hit set
    bool window_in_stats = false;  // the window open now is one of the duty cycle's after the first detach
    size_t sites_now = 0;    // entry sites attached in the window open now (cycled sets)
    // Per window kind (restricted to the hit set, or every site): windows, attach and detach time, sites held.
    struct WindowSites {
      uint64_t windows = 0;
      int64_t attach_ns = 0, detach_ns = 0;
      size_t min_sites = SIZE_MAX, max_sites = 0;
      // Probe hits while its links were being attached (before the window opened) and detached (after it closed):
      // calls that paid a trap and were not watched, what the budget prices per cycle.
      uint64_t toggle_hits = 0;
      uint64_t cold_hits = 0;  // of those, while the links outside the hit set were attached or detached
    } restricted, full_set;
    // The budget's first detach (every site, while the family was hot): its time and the calls trapped meanwhile,
    // which the smoothed price of a cycle (cycle_cost_s) takes in as if every cycle cost that much.
    int64_t first_detach_ns = 0;
    uint64_t first_detach_hits = 0;
    // Operators that a full-set window found after the first detach: (cookie, when, monotonic ns).
    std::vector<std::pair<uint64_t, int64_t>> found_late;
  };
  // After the budget's first detach, one window in every kFullSetEvery of a family with a hit set attaches every
  // site: the kFullSetWindow-th, the first long counted window of the eight (control_loop's window pattern).
  static constexpr uint64_t kFullSetEvery = 8, kFullSetWindow = 4;
  // The entry-only windows trap the even operators' and the multiples of four's calls (rather than every operator's
  // and the even ones') where either share, and the even ones' beyond the fourth's, is at least this: enough hits
  // a window, and two trap densities the fit can tell apart.
  static constexpr double kMinQuarterShare = 0.1;
  // Probe families by index: the uprobe families first (one ProbeGate each), then the others.
  enum Family : int { kCuda = 0, kNccl, kTorch, kPython, kUprobeFamilies, kProc = kUprobeFamilies, kPyStack, kFamilies };
  // The loaded family of index `family`, or null.
  ProbeFamily* family(int family) const {
    return family >= 0 && family < kFamilies ? families_[static_cast<size_t>(family)].get() : nullptr;
  }
  const char* family_name(int family) const;
  FamilyProgs progs_of(int family) const;
  const bpf_map* counters_of(int family) const;
  uint32_t* capture_flag_of(int family) const;
  bpf_map* thread_map_of(int family) const;
  // Attaches a probe set (uprobe_multi, or one uprobe per probe where that fails); false when nothing attached.
  // entry_only: without its return probes; cookie_mod: entry probes whose cookie it divides only (sampled_count.h).
  // only: the entry (and return) probes whose cookie is in it only (the hit set), or, with `outside`, those whose
  // cookie is not. Returns the entry probes attached.
  size_t attach_set(int family, ProbeSet& set, bool entry_only = false, uint32_t cookie_mod = 1,
                    const std::set<uint64_t>* only = nullptr, bool outside = false);
  void detach_set(ProbeSet& set);
  // Adds a family's probes of one library; attaches them unless the family is duty-cycled and off now.
  // `watched`: false for probes kept beside another family's (ProbeFamily::probes_beside), which do not start the
  // family's watching series.
  bool add_probe_set(int family, ProbeSet set, bool watched = true);
  // hits_only: attach only the family's hit set (ProbeGate::hit_cookies), where it has one.
  // subset: an entry-only window of the second kind (SampledSpanKind::entry_subset); cookie_mod as attach_set's.
  void switch_gate(int family, bool on, bool entry_only = false, bool subset = false, uint32_t cookie_mod = 1,
                   bool hits_only = false);
  // Ends the span of a family's estimate in progress (a window of kind `ended`, or unwatched time) at `t_ns`.
  void end_span(int family, SampledSpanKind ended, int64_t t_ns);
  // CPU time of the traced processes so far (all threads, ns; a process gone keeps its last reading); -1 with --all.
  int64_t traced_cpu_ns();
  void add_watching_series(int family);
  void control_loop();
  void rebalance_budget(double period_s);
  bool budget_overrun(double since_s);
  double job_cpu_seconds();
  void measure_hit_cost();
  std::string kernel_name(uint32_t pid, uint64_t address);
  // Python stack sampling: registers the interpreter `lib` of `pid` with the sampler. Returns the python layer bit
  // when the process is sampled, 0 when this interpreter is not for the sampler and the probe paths handle it.
  unsigned register_python_stack(uint32_t pid, const std::vector<MapEntry>& maps, const MappedLibrary& lib);
  void note_once(const std::string& text);
  // Only the C-API fallback has a fixed duty cycle: USDT probes cost nothing where the interpreter has them.
  bool duty_cycled() const {
    return topts_.python_mode == "capi" && topts_.python_duty_on_ms > 0 &&
           topts_.python_duty_period_ms > topts_.python_duty_on_ms;
  }
  bool budgeted() const { return !topts_.full_detail && topts_.budget_pct > 0; }
  void set_watching(int family, bool on);
  void report_counters(bool final_report);
  void report_program_runs();
  bool wants(Layer l) const;

  std::vector<Layer> layers_;
  TracerOptions topts_;
  CollectorOptions copts_;
  TelemetrySink* sink_ = nullptr;
  std::vector<CallSpec> specs_;

  // The families loaded (null: not requested), by Family index. Loaded in start(), destroyed in release(). The
  // typed pointers are to those with calls of their own (fold ranges, operator series, stack sampling, lifecycle).
  std::array<std::unique_ptr<ProbeFamily>, kFamilies> families_;
  CudaProbes* cuda_ = nullptr;
  TorchProbes* torch_ = nullptr;
  ProcProbes* proc_ = nullptr;
  PyStackProbes* pystack_ = nullptr;
  ring_buffer* rb_ = nullptr;
  std::vector<std::unique_ptr<RingCtx>> ring_ctx_;

  std::thread poller_, maintainer_;
  std::atomic<bool> stopping_{false};
  bool started_ = false;

  ElfCache elf_cache_;
  mutable std::mutex mu_;  // everything below
  std::condition_variable cv_;
  std::set<uint32_t> pending_rescan_, pending_exit_;
  std::set<uint32_t> traced_;
  std::map<int, std::vector<bpf_link*>> links_;                        // USDT links by pid filter (-1: all)
  std::set<std::tuple<int, uint64_t, uint64_t, uint64_t, int>> attached_;  // pid, dev, inode, offset, family
  std::map<int, std::set<std::pair<uint64_t, uint64_t>>> known_libs_;  // pid filter -> (dev, inode) handled
  std::map<int, unsigned> attached_layers_;                            // pid filter -> bit per Layer
  std::set<std::string> notes_sent_;
  std::map<uint32_t, std::string> identified_;  // launcher identity (RANK...) noted per process
  std::vector<bpf_link*> exited_links_;  // of processes that exited while stopping: left to release()
  // Each traced process's maps as last read (rescan), kept a few seconds past its exit: records are drained on a
  // timer, so a launch's kernel is often named after its process has gone (pid -> maps, exit time or 0).
  std::map<uint32_t, std::pair<std::vector<MapEntry>, int64_t>> last_maps_;

  // Probe gates of the uprobe families (cuda, nccl, torch, python C-API) and the thread that duty-cycles them.
  mutable std::mutex gate_mu_;  // gates_; taken before mu_ where both are
  std::array<ProbeGate, kUprobeFamilies> gates_;
  bool use_multi_ = true;
  double hit_cost_ns_ = 0;
  std::thread control_;
  int64_t start_ns_ = 0, budget_mark_ns_ = 0;  // recording start; last budget period's end
  double last_job_cores_ = 0;                  // the job's CPU (cores) over the last budget period
  std::map<uint32_t, uint64_t> cpu_ticks_;  // job CPU: pid -> utime+stime at the last budget period
  uint64_t system_busy_ticks_ = 0;
  // The spans' CPU clock (under gate_mu_): task-clock counters, and pid -> (first, last) reading, ns.
  TaskClocks task_clocks_;
  std::map<uint32_t, std::pair<int64_t, int64_t>> cpu_ns_by_pid_;

  // Poller-only state.
  std::unique_ptr<RecordDecoder> decoder_;
  std::map<std::pair<uint32_t, uint64_t>, std::string> kernel_names_;  // (pid, host stub address) -> name
  std::atomic<uint64_t> events_{0};
  std::array<uint64_t, kFamilies> lost_reported_{};  // per family, already sent to the sink
};

}  // namespace stackscope::trace
