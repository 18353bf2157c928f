// Straggler localisation after KAIR (§III-B): stage 1 finds which worker's execution rhythm diverges from its
// peers (pairwise Kolmogorov-Smirnov), stage 2 which of its operations are outliers (z-scores of start time and
// duration per operator identity across workers), stage 3 walks the step's dependency graph backwards to tell a
// culprit from a victim (a slow compute operator, or a communication/synchronisation edge).
// Pure computation over model/worker_timeline.h: no I/O.
#pragma once
#include <Eigen/Dense>
#include <cstdint>
#include <string>
#include <vector>

#include "model/worker_timeline.h"

namespace stackscope::analyze {

// ---------------------------------------------------------------- steps and clocks
enum class StepSource { markers, collectives, autocorrelation, none, syncs };
std::string_view step_source_name(StepSource s);

struct StepDetection {
  StepSource source = StepSource::none;
  int period = 0;  // collectives (or operations, for autocorrelation) per step
  int steps = 0;   // distinct step numbers seen
};

// Sets TimelineOp::step on every operation: ProfilerStep markers when present, else the period of each worker's
// collective sequence, else the period of its operation-name sequence (autocorrelation). Step numbers are
// aligned across workers (same number = same iteration). Also fills missing collective_seq (n-th operation
// on its communicator).
StepDetection assign_steps(TimelineSet& set);

// Per worker, the offset of its clock (ns) relative to the cluster: the 10% quantile, over collective
// instances it took part in, of its end time minus the median end time of all participants (a collective
// ends together everywhere; delays only add). 0 for workers without collectives.
std::vector<int64_t> estimate_clock_offsets(const TimelineSet& set);

// Smallest period p (1..max_period) with seq[i] == seq[i+p] for at least `min_match` of the positions; 0 if none.
int sequence_period(const std::vector<uint64_t>& seq, int max_period, double min_match = 0.9);

// ---------------------------------------------------------------- stage 1
// Exact two-sample Kolmogorov-Smirnov statistic max_t |F_a(t) - F_b(t)| (inputs need not be sorted).
double ks_statistic(std::vector<double> a, std::vector<double> b);

struct KsOptions {
  int grid_points = 2048;   // at most this many points: every distinct pooled value (exact D) or pooled
                            // quantiles; fewer when pairs x points would pass 8M (large clusters)
  int max_peers = 128;      // larger peer groups compare each worker with this many random peers
  // Fixed-length windows over the value range (KAIR: operations completed per fixed time window) instead of
  // pooled values: jitter smaller than a window does not count as divergence. For timelines.
  bool fixed_windows = false;
  uint64_t seed = 1;
};

// Abnormality score S_A = mean over peers of D(A, B) for every worker, within its peer group. samples[w] is
// worker w's sample; workers with an empty sample score 0 and are nobody's peer. If d_matrix is given, it
// receives the full pairwise D matrix (only sensible for small N).
std::vector<double> ks_abnormality(const std::vector<std::vector<double>>& samples, const std::vector<int>& group,
                                   const KsOptions& options, Eigen::MatrixXf* d_matrix = nullptr);

struct Stage1Window {
  int32_t first_step = 0, last_step = 0;  // inclusive step labels
  std::vector<double> score;              // S_A per worker in this window
};

struct Stage1Result {
  std::vector<double> whole_run;       // S_A over all steps
  std::vector<Stage1Window> windows;   // S_A per window of consecutive steps (the heatmap)
  std::vector<double> persistent;      // whole-run S_A minus the peer-group median (0 unless slower than the group)
  std::vector<double> episodic;        // max over windows where the worker is slower than its group of
                                       // S_A minus the window's median S_A
  std::vector<int> episode_window;     // window where the episodic peak is
  std::vector<double> score;           // max(persistent, episodic): the straggler score
  std::vector<int> ranking;            // workers by score, most anomalous first
  Eigen::MatrixXf pairwise;            // whole-run D among heatmap_workers
  std::vector<int> heatmap_workers;    // at most 64: the top of the ranking, then peers
};

struct Stage1Options {
  KsOptions ks;
  int window_steps = 0;  // 0: automatic (1 step for short traces, about 1/20 of the run for long ones)
  int heatmap_max = 64;
  // Windows compare each worker's values divided by its own whole-run median, so that a worker that is
  // always a little slower (other hardware) does not hide one that turns slow mid-run. For step tables.
  bool self_normalize_windows = false;
};

// samples[w][k]: the values worker w produced in step index k (steps[k] its label): completion phases of its
// operations for traces, its step time for step tables. group[w]: peer group.
Stage1Result stage1_rhythm(const std::vector<std::vector<std::vector<double>>>& samples,
                           const std::vector<int32_t>& steps, const std::vector<int>& group,
                           const Stage1Options& options);

// ---------------------------------------------------------------- stage 2
struct Stage2Options {
  bool robust = true;      // median/MAD (default): with N <= 9 workers a mean/s.d. z can never exceed 3
  double threshold = 3.0;  // a_i > threshold flags an operation (3-sigma rule)
  int min_peers = 3;       // identities seen on fewer workers are not scored
};

struct OpStats {
  float z_start = 0, z_duration = 0, z_end = 0;
  float expected_start = 0, expected_duration = 0;  // ns; start relative to the cluster step start
  float start_delay = 0, end_delay = 0;             // ns later than the cluster centre (negative: earlier)
  int peers = 0;                                    // workers sharing this identity (0: not scored)
};

struct FlaggedOp {
  int worker = 0;
  uint32_t op = 0;  // index into the worker's ops
  double a = 0;     // max(|z_start|, |z_duration|)
};

struct Stage2Result {
  std::vector<std::vector<OpStats>> stats;  // [worker][op]
  std::vector<FlaggedOp> flagged;           // a > threshold, highest first
  std::vector<int> group;                   // peer group per worker (as used for the identities)
  bool robust = true;
};

// Times must already be clock-corrected (offsets[w] is subtracted here). Identity = (peer group, step, name,
// n-th occurrence of that name in the step on that worker).
Stage2Result stage2_outliers(const TimelineSet& set, const std::vector<int64_t>& offsets, const std::vector<int>& group,
                             const Stage2Options& options);

// ---------------------------------------------------------------- stage 3
enum class CauseKind { compute_operator, communication_link, dependency_edge };
std::string_view cause_kind_name(CauseKind k);
// The two classes of the eval: a compute operator, or an edge (communication or synchronisation).
inline bool cause_is_edge(CauseKind k) { return k != CauseKind::compute_operator; }

struct RootCause {
  CauseKind kind = CauseKind::compute_operator;
  int worker = 0;
  std::string operation;        // the operator, or "A -> B" for an edge, or the collective for a link
  std::vector<int32_t> steps;   // steps where it was the culprit
  double excess_ns = 0;         // total delay it added (observed - expected), summed over steps
  int victims = 0;              // flagged operations whose blame led here
  double z = 0;                 // strongest z-score of the evidence
  double score = 0;             // ranking key: excess_ns, halved for a sporadic cause (in < 3/4 of the steps)
  std::string evidence;         // one line a person reads
};

struct Stage3Options {
  double threshold = 3.0;
  size_t max_root_causes = 20;
};

std::vector<RootCause> stage3_blame(const TimelineSet& set, const std::vector<int64_t>& offsets,
                                    const Stage2Result& stage2, const Stage3Options& options);

// ---------------------------------------------------------------- the waiting signal and the verdict
// At a synchronisation point (a collective, a barrier, a stream sync that waits on one) every rank leaves
// together, so the rank that arrived last waited least: the healthy ranks wait for the straggler, it does not
// wait. Synchronisation points are the ends of waits, clustered in time across workers; a rank with no
// recorded wait at a point waited less than the recorder's threshold (it arrived last).
struct SyncPoints {
  std::vector<int64_t> end_ns;                  // [point] when the waits ended (earliest end in the cluster)
  std::vector<std::vector<int64_t>> wait_ns;    // [point][worker] time that worker waited there (0: none seen)
  std::vector<uint32_t> name;                   // [point] the most common wait name there
  std::vector<int32_t> step;                    // [point] the step its waits belong to (-1 unknown)
  int period = 1;                               // points per step
  int steps = 0;                                // points / period, or step_ends' size
  // When each step ended: every period-th point; with one point per step, also the ends of steps that passed
  // with every wait under the recorder's threshold, evenly spaced in gaps of a whole number of steps.
  std::vector<int64_t> step_ends;
};

// One point per step (its waits summed, its end the last one's), from the step numbers the waits carry: a
// DDP step over NCCL waits 2-4 times (buckets, loss.item(), a stop flag every few steps), not a fixed number
// of times, so no period of points is the step. Points of no step (start-up) are left out. Empty (no points)
// when fewer than 5 steps are numbered.
SyncPoints points_per_step(const SyncPoints& points);

// A host block that ends within `tolerance_ns` of another worker's block is a wait for the same event (a sync
// whose call the recorder did not see: a duty-cycled CUDA layer, a C call under a Python frame): made kind sync.
// A sleep or a data-loader wait ends when its own time is up, not together with another rank (a rank waiting for
// the sleeper ends at least the sleeper's launch / compute time later: tight tolerance).
void promote_coincident_blocks(TimelineSet& set, int64_t tolerance_ns = 150'000);

// Waits: ops of kind sync, and collectives / p2p when set.collectives_include_wait. Points seen only at the
// start or end (rendezvous, the final barrier: names seen at under 10 % of the points) are left out; points
// outside any worker's active span too.
SyncPoints find_sync_points(const TimelineSet& set);

enum class VerdictKind { none, one_straggler, slow_group, spread, undetermined };
std::string_view verdict_kind_name(VerdictKind k);
enum class CauseClass { compute, host, communication, gpu, memory, unknown };
std::string_view cause_class_name(CauseClass c);

struct WorkerLateness {
  double late_ns = 0;        // mean per point: how much later it arrived than the earliest rank
  double wait_ns = 0;        // mean per point: how long it waited there
  double last_share = 0;     // share of points where it arrived last (waited least)
  double cpu_ns = 0;         // mean per step: on-CPU time (stack samples)
  double offcpu_ns = 0;      // mean per step: blocked outside any wait (sleep, data, I/O)
  double launches = 0;       // typical kernel launches per step (0: none seen)
  int launch_steps = 0;      // steps whose launches were watched from start to end
  double sm_util = -1;       // NVML: mean SM utilisation of its process over the points (-1: not recorded)
  double others_sm_util = 0; // NVML: mean SM utilisation of other processes on its GPU (while seen there)
  double others_busy_ns = 0; // NVML: from the first to the last sample with another process busy on its GPU
  double others_listed = 0;  // NVML: share of the points' span with another process, seen computing, listed on its GPU
  double throttled = 0;      // NVML: share of samples its GPU reported throttling
  double gpu_mem_used = -1;  // NVML: largest share of its GPU's memory in use (-1: not recorded)
  double allocs = 0;         // per step: device memory calls to the driver (cudaMalloc / cudaFree)
  double retransmits_per_s = 0;  // its host's TCP retransmissions per second
  double runnable_per_cpu = 0;   // its host's runnable threads per CPU, mean over the points (0: not recorded)
  double runq_ns = -1;           // mean per step: its threads runnable but waiting for a CPU (kernel layer; -1: not
                                 // recorded)
  double oncpu_ns = -1;          // mean per step: its threads on a CPU (kernel layer; -1: not recorded)
};

struct StragglerVerdict {
  VerdictKind kind = VerdictKind::undetermined;
  std::vector<int> workers;      // the straggler or the slow group, latest first
  CauseClass cause = CauseClass::unknown;
  std::string cause_detail;      // what the straggler did while the others waited
  double confidence = 0;         // 0..1
  double excess_ns = 0;          // how long the others waited for them, summed over the points (<= recorded_ns)
  // False where the straggler is named from what its GPU did (extra launches, NVML): the others then waited for
  // it in GPU kernels (collectives), which the host does not time, and excess_ns (0) is no measurement.
  bool excess_measured = true;
  double recorded_ns = 0;        // the span of the points analysed
  double step_ns = 0;            // median time between steps
  int points = 0;                // synchronisation points analysed
  std::vector<WorkerLateness> per_worker;
  std::string evidence;          // one line a person reads
};

struct VerdictOptions {
  double min_share_of_step = 0.10;  // a lateness under 10 % of the step is no straggler (ranks of a clean job
                                    // on a shared host differ by up to ~9 %)
  double min_late_ns = 500'000;     // nor under 0.5 ms (the recorder sees blocks from 0.2 ms)
  double min_t = 4;                 // paired t of the lateness difference across points
  // CPU contention on a late rank's cores: the kernel's run-queue wait per CPU time of its threads at least this
  // many times every other rank's (names the cause of a lateness above the threshold; under it, only said).
  double contention_ratio = 1.2;
};

StragglerVerdict wait_verdict(const TimelineSet& set, const SyncPoints& points, const VerdictOptions& options = {});

// ---------------------------------------------------------------- the whole analysis
struct FrequencyTimeline {  // KAIR Fig. 4: operations completed per time bin, per worker
  int64_t t0_ns = 0, bin_ns = 0;
  std::vector<int> workers;
  std::vector<std::vector<uint32_t>> counts;  // [row][bin]
};

// A flagged operation as reported (self-contained: the timelines are not kept).
struct FlaggedOpReport {
  int worker = 0;
  std::string name;
  OpKind kind = OpKind::compute;
  int32_t step = -1;
  double a = 0, z_start = 0, z_duration = 0;
  double duration_ns = 0, expected_duration_ns = 0, start_delay_ns = 0;
};

struct StragglerOptions {
  VerdictOptions verdict;
  Stage1Options stage1;
  Stage2Options stage2;
  Stage3Options stage3;
  int timeline_bins = 200;
  size_t max_flagged_reported = 200;
};

struct StragglerReport {
  std::vector<std::string> workers;
  std::vector<int> group;             // peer group per worker
  StepDetection steps;
  std::vector<int32_t> step_labels;   // steps analysed
  std::vector<int64_t> clock_offsets; // ns, per worker
  Stage1Result stage1;
  Stage2Result stage2;                // empty for step tables
  std::vector<FlaggedOpReport> flagged;  // the strongest stage-2 outliers, highest a first
  std::vector<RootCause> root_causes; // empty for step tables
  // The verdict: the worker of the strongest root cause when stage 3 found one, else stage 1's top worker
  // (stage 1 is the cheap filter; stage 3 names the culprit, not its victims). Then stage 1's order.
  std::vector<int> stragglers;
  FrequencyTimeline timeline;
  bool from_step_table = false;
  std::vector<std::vector<double>> step_times;  // step tables: [worker][step] (for the timeline view)
  StragglerVerdict verdict;           // from the waiting signal; undetermined when nobody was seen waiting
  std::vector<WorkerTimeline> identity;  // per worker: rank, local rank, host, GPU, pid, loop function (no ops)
};

StragglerReport analyze_stragglers(TimelineSet set, const StragglerOptions& options = {});
StragglerReport analyze_step_times(const StepTimeTable& table, const StragglerOptions& options = {});

// Peer groups: workers that take part in the same set of collective communicators do the same work (data-parallel
// replicas, or the same pipeline stage); workers are compared only with their group.
std::vector<int> peer_groups(const TimelineSet& set);

}  // namespace stackscope::analyze
