// The calls a duty-cycled probe family made while it was not watching, estimated from the CPU time its job used.
// Pure arithmetic (no I/O): the tracer feeds it the spans it timed (src/trace/probe_gates.cpp) and states the result
// in its end note; tests feed it constructed spans.
//
// Why CPU time and not wall time: a watched call pays its probes' traps (two of a few us each for an operator with a
// return probe), so on an operator of 0.5 us the thread runs 2-3x fewer calls a second while watched than while
// not, and scaling the watched count by watched wall time is 60 % low (docs/benchmarks/op-counts.md). The job's
// CPU per call is what the probes change, and what a trap costs is measured in the job itself: between its counted
// windows (entry and return probes) the gates open entry-only windows, on every operator (one trap a call) or on a
// subset of them (a share s of the calls, known from the counted windows: s traps a call). A least-squares fit
// over the entry-only windows of
//   CPU of a window = F + a calls + p traps
// gives the calls' own CPU a, a trap's p, and F, what a window costs whatever its calls (cold caches after the
// attach; window lengths alternate so that F and a can be told apart). Entry traps only: a return probe costs
// less than the entry trap (0.77 against 1.13 us on the CPU VM), and extrapolating from one and two traps a call
// read a 30 % too high and the counts 20 % low. Where the operators allow it, the two kinds of entry-only window
// trap about half and a quarter of the calls rather than all and half (SampledSpan::share): the CPU a call takes is
// not linear in its traps over the whole range, and the nearer to none the fit's densities, the shorter its
// extrapolation. On a VM whose traps cost 7-8 us against calls of 0.9 us, the CPU per call rose by 7.3 us a trap a
// call up to half the calls trapped and by 5.2 us from there to every call: the fit over a half and every call
// read a 2.2-3x too high and the counts 33-64 % low, over a quarter and every call 21-25 % low. An unwatched span's
// calls are its CPU, less what the traps still made there cost (probes trapping while being detached), divided by
// a. Where the job waits for something else (a GPU), the traps either cost nothing of its rate and its CPU per call
// does not grow with them (spinning waits: p ~ 0), or their CPU comes on top of the calls' (blocking waits): either
// way a is the calls' CPU. Without subset windows the fit takes every window (traps of both kinds alike); without
// CPU times it falls back to wall time.
#pragma once
#include <cstdint>
#include <span>
#include <string>

namespace stackscope {

enum class SampledSpanKind {
  counted,     // entry and return probes attached, calls counted (the family's watching series is 1)
  entry_only,  // only entry probes attached: calls known from the probe hits, not counted per operator
  entry_subset,  // entry probes on a subset of the operators only: calls = hits / their share of the calls
  unwatched,   // probes detached (or being attached/detached: hits there are traps of calls not counted)
};

// One stretch of time of a duty-cycled family, in order. cpu_ns < 0: the job's CPU time was not known.
struct SampledSpan {
  SampledSpanKind kind = SampledSpanKind::unwatched;
  int64_t wall_ns = 0;
  int64_t cpu_ns = -1;  // CPU time of the traced processes (all their threads) over the span
  uint64_t hits = 0;    // probe program runs over the span (entries and returns)
  // Entry-only and subset windows: the share of the calls their entry probes saw, where the caller knows it per
  // window; < 0: by kind (entry_only every call, entry_subset the estimate's subset_share).
  double share = -1;
  // Blocking CUDA synchronisations (estimate_from_sync_intervals below); syncs < 0: not counted.
  int64_t syncs = -1;           // made over the span by the traced processes (their probes are never duty-cycled)
  uint64_t sync_intervals = 0;  // counted windows: complete intervals between two consecutive syncs of a process
  double interval_calls = 0;    // counted windows: the calls made in those intervals
  double captured_calls = 0;    // counted windows: every call counted, by process, ...
  double syncing_calls = 0;     // ... and those of the processes that synchronised in the window
};

struct SampledCountEstimate {
  double counted_calls = 0;    // calls in counted windows (hits / 2)
  double entry_only_calls = 0;  // calls in entry-only windows (hits; hits / share in subset windows)
  double unwatched_calls = 0;  // estimated
  double scale = 1;            // (counted + entry-only + unwatched) / counted: what counts made over the spans scale by
  // Relative error of scale, 95 %: jackknife over blocks of four windows (Student's t), plus 5 % for what the
  // windows' spread cannot show; 1 (100 %) with fewer than three blocks.
  double error = 0;
  double wall_scale = 1;       // what scaling by watched wall time would say (the estimate before CPU times)
  double cpu_per_call_ns = 0;  // a: the calls' own CPU (0 where the wall-time fallback was used)
  double trap_ns = 0;          // p: CPU a trap costs the job
  double window_cost_ns = 0;   // F: CPU a window costs the job whatever its calls
  int windows = 0;             // counted and entry-only windows
  bool entry_traps_only = false;  // fitted over entry-only windows (subset windows present), not every window
  bool from_cpu = false;       // false: wall-time scaling (no entry-only windows, no CPU times, or a <= 0)
  std::string why_wall;        // why the fallback, where it was used
};

// subset_share: the share of calls that the entry_subset windows' probes see (0: none such).
// traps_per_counted_call: hits a call makes in a counted window (2: entry and return).
SampledCountEstimate estimate_sampled_counts(std::span<const SampledSpan> spans, double subset_share = 0,
                                             int traps_per_counted_call = 2);

// The calls of a GPU job estimated from its blocking synchronisations (cudaDeviceSynchronize, cudaStreamSynchronize,
// cudaEventSynchronize, cudaMemcpy): a training or inference loop makes the same calls between two of them, step
// after step, and their probes are never duty-cycled, so they are counted outside the watched windows too. Why not
// CPU time: a host that spins in the synchronisation uses CPU at the GPU's pace, not the operators' (small-batch
// GPT-2 inference on an H200: +58.6 %, stated 178 %; docs/benchmarks/op-counts.md). Calls per interval: the
// calls of the complete intervals between consecutive syncs of one process inside counted windows, pooled over the
// windows; an unwatched span's calls are that times its syncs (each sync starts one interval; a window's edges cut
// intervals at random phases, so its calls are on average that many too); entry-only windows keep their known calls.
struct SyncIntervalEstimate {
  bool usable = false;      // enough windows with intervals, calls per interval steady, the syncing processes' calls
  std::string why_not;      // why not, where not usable
  double calls_per_interval = 0;
  double spread = 0;        // relative spread (sd / mean) of the windows' calls per interval, weighted by intervals
  double coverage = 0;      // share of the counted calls made by processes that synchronised in their window
  int windows = 0;          // counted windows with complete intervals
  uint64_t intervals = 0;   // complete intervals in them
  double unwatched_syncs = 0;
  // The model's check: a window at a random phase of the steps holds on average calls per interval x its syncs, so
  // counted calls / (calls_per_interval x the counted windows' syncs) - 1 is ~0 where every stretch of the job
  // follows its syncs. A stretch that makes many calls per sync (a warmup of 20 steps under one sync, an evaluation
  // phase without one) is counted whole inside a window but estimated at calls per interval x its syncs outside
  // them: the gap, where it exceeds the model's 5 %, is added to the error (H200: 16 % of the counts from
  // 20 steps under one sync).
  double counted_syncs = 0;
  double unaccounted = 0;
  bool unaccounted_in_error = false;  // beyond the model's 5 %: added to the error
  double counted_calls = 0, entry_only_calls = 0, unwatched_calls = 0;
  double scale = 1;         // (counted + entry-only + unwatched) / counted, as SampledCountEstimate's
  double error = 1;         // 95 %: jackknife over blocks of four windows + 5 %, as SampledCountEstimate's
};

SyncIntervalEstimate estimate_from_sync_intervals(std::span<const SampledSpan> spans, double subset_share = 0,
                                                  int traps_per_counted_call = 2);

// Both estimates and the one the recording states: the syncs' where usable, else the CPU time's.
struct SampledCallsReport {
  SampledCountEstimate cpu;
  SyncIntervalEstimate syncs;
  bool from_syncs = false;
  double scale() const { return from_syncs ? syncs.scale : cpu.scale; }
  double error() const { return from_syncs ? syncs.error : cpu.error; }
};

SampledCallsReport estimate_sampled_calls(std::span<const SampledSpan> spans, double subset_share = 0,
                                          int traps_per_counted_call = 2);

}  // namespace stackscope
