// Per-layer feature tables with one row per fixed time window (what `stackscope features` writes and the
// Table I benchmark feeds to `stackscope detect`). layer_features.h gives one row per event; a fault such as
// forced synchronisation or a competing process shows as much in how many calls a window holds and how long
// they take together as in any single call, so here every window of the recording is a row, including windows
// where the layer had no event. Pure: events and samples in, matrices out.
//
// Call layers (cuda, torch, python, kernel; nccl adds bandwidth), per chosen event name:
//   NAME.log10_count            log10(1 + calls starting in the window)
//   NAME.median_log10_lat_ns    median of log10(duration ns) of the window's finished calls
//   NAME.p95_log10_lat_ns       95th percentile of the same
//   NAME.log10_bytes            log10(1 + sum of the calls' "bytes"), for names whose calls carry bytes
//   NAME.median_log10_bw_Bps    nccl only: median of log10(bytes / duration s)
// A window with no finished call of NAME has no latency (or bandwidth) of its own: it gets NAME's median over
// the whole recording, so an idle window looks typical in latency and says what it is through its count.
// Per layer: LAYER.log10_calls (every call of the layer) and LAYER.busy_fraction (time inside calls of nesting
// depth 0, clipped to the window, over the window's length: nested calls are not counted twice; several
// threads can make it exceed 1).
// Python stack samples (events with arg "sample": "cpu" or "off-cpu", --python-mode stack) are named after their
// leaf function ("f", "f (off-cpu)"), so the per-name columns above count samples and, for off-cpu, median/p95
// blocked time; they are not in busy_fraction, and add python.oncpu_fraction (sampled on-CPU time / window),
// python.offcpu_fraction (blocked time of all sampled threads clipped to the window / window: the mean number of
// threads blocked, so above 1 with several threads) and python.log10_offcpu_count.
//
// Sampled series (nvml, host), per series: DEVICE.NAME.mean (gauges), DEVICE.NAME.rate_per_s (counters: the
// increase per second between consecutive samples, a reset skipped), and DEVICE.NAME.max for utilisation
// series. A window without a sample carries the previous window's value forward (the first value before the
// first sample). Constant series (SeriesKind::static_value) are left out. NVML per-process series
// (device "gpu0/pid123") become per-GPU columns: gpu0.procs.count, gpu0.procs.max_sm_util and, for the
// processes that are not the traced target, gpu0.other_procs.count, .sm_util (sum of their window means) and
// .mem_used (bytes, sum).
#pragma once
#include <Eigen/Dense>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/event.h"
#include "model/layer.h"
#include "model/series.h"

namespace stackscope::analyze {

// Windows [start(i), end(i)) for i < count, back to back from first_ns.
struct WindowGrid {
  int64_t first_ns = 0;
  int64_t width_ns = 0;
  size_t count = 0;
  int64_t start(size_t i) const { return first_ns + static_cast<int64_t>(i) * width_ns; }
  int64_t end(size_t i) const { return start(i) + width_ns; }
  std::optional<size_t> index_of(int64_t t_ns) const;  // nullopt outside the grid
};

// Whole windows from first_ns up to last_ns. A trailing partial window is dropped (its counts would look like
// a collapse); a span shorter than one window gives one window. Throws std::invalid_argument for a width
// <= 0 or last_ns < first_ns.
WindowGrid make_window_grid(int64_t first_ns, int64_t last_ns, int64_t width_ns);

struct WindowFeatureTable {
  WindowGrid grid;
  std::vector<std::string> columns;
  Eigen::MatrixXd values;              // grid.count rows x columns.size()
  std::vector<size_t> filled;          // per column: windows whose value was filled in (no data of their own)
  std::vector<std::string> subjects;   // event names or series keys the columns describe
};

struct CallWindowOptions {
  size_t top_names = 12;  // the most frequent event names of the layer get columns
  // Names that get columns whenever the recording has them, however rare (see cuda_sync_and_memory_calls).
  std::vector<std::string> always_names;
};

// CUDA runtime and driver synchronisation and allocation calls: forced synchronisation and allocator churn,
// two of Table I's CUDA faults, show in them even where they are rare.
const std::vector<std::string>& cuda_sync_and_memory_calls();

// What CallWindowFeatures needs of one event, for callers that decode events without building Event objects
// (RecordingReader::for_each_event_ref): add(const Event&) fills one from the event's arguments.
struct CallRecord {
  static constexpr uint32_t kNoNameKey = UINT32_MAX;
  Layer layer = Layer::host;
  bool timed = true;  // false: instant or unfinished (no duration)
  bool instant = false;  // kEventInstant (a point in time, not an unfinished call)
  uint32_t pid = 0, tid = 0;
  int64_t start_ns = 0, duration_ns = 0;
  std::string_view name;
  // The caller's own id for `name` (its recording's string id), so that a name is hashed once per recording
  // rather than once per event; kNoNameKey: none.
  uint32_t name_key = kNoNameKey;
  int64_t depth = 0;   // integer argument "depth" (0 when absent)
  double bytes = -1;   // integer argument "bytes" clamped at 0; < 0: the event has no "bytes" argument
  bool sample = false;  // has a "sample" argument (a Python stack sample)
  bool offcpu = false;  // ... and it is "off-cpu"
};

// The CallRecord of an Event (its string arguments read by key), for callers that hold Event objects.
CallRecord call_record_of(const Event& e);

// The CallRecord fields that an event's header gives alone, for Event and for the store's zero-copy EventRef
// (same field names); its name and arguments are left to the caller.
template <typename EventHeader>
CallRecord call_record_header(const EventHeader& e) {
  CallRecord c;
  c.layer = e.layer;
  c.timed = !(e.flags & (kEventInstant | kEventUnfinished));
  c.instant = e.flags & kEventInstant;
  c.pid = e.pid;
  c.tid = e.tid;
  c.start_ns = e.start_ns;
  c.duration_ns = e.duration_ns;
  return c;
}

// Accumulates the events of one layer (others are ignored) one at a time, so a long recording never has to be
// held as Event objects; table() builds the columns described above.
//
// Memory is O(names x windows), not O(events): per name and window, a count, a byte sum and the window's
// log10(latency) (and log10(bandwidth)) values: kept as they are (float, as before) up to kExactValues of them,
// beyond that as a histogram in bins of kLogBinWidth decades. A median or 95th percentile is threshold_at_quantile
// of the values; from a histogram, the same interpolation between order statistics with each order statistic at
// its bin's centre. So a window with at most kExactValues finished calls of a name gives the exact value, and a
// busier one a value within kLogBinWidth / 2 = 0.005 (1.2 % of the latency) of it. The recording-wide median
// that fills windows without calls is exact up to kExactOverall calls of the name, else within the same 0.005.
class CallWindowFeatures {
 public:
  CallWindowFeatures(Layer layer, WindowGrid grid, CallWindowOptions options = {});
  void add(const Event& e);
  void add(const CallRecord& c);
  size_t events() const { return events_; }  // events of the layer that started inside the grid
  // The table's first `windows` rows (all by default): the same values as the whole table's first rows -- which
  // names get columns and the medians that fill windows without calls are judged on every window added so far --
  // built in time proportional to those rows (the online engine's pass: its complete windows of a longer grid).
  WindowFeatureTable table(size_t windows = SIZE_MAX) const;

  static constexpr double kLogBinWidth = 0.01;      // decades per histogram bin
  static constexpr size_t kExactValues = 32;         // per name and window, kept exactly up to this many
  static constexpr size_t kExactOverall = 1u << 16;  // the recording-wide median: exact up to this many calls

 private:
  // One window's log10 values of one name: up to kExactValues as float bits, then a sparse histogram of sorted
  // entries (bin << 20 | count) in kLogBinWidth bins; a bin whose count fills 20 bits continues in another entry.
  struct LogHistogram {
    std::vector<uint32_t> entries;
    bool binned = false;
    void add(double log10_value);
    void add_binned(float log10_value);
    uint64_t total() const;
  };
  struct Cell {
    uint32_t count = 0;
    double bytes = 0;
    LogHistogram lat, bw;
  };
  static constexpr size_t kChunk = 64;  // windows per allocation: a rare name costs only the chunks it touches
  struct NameState {
    std::string name;
    uint64_t count = 0;
    bool has_bytes = false;
    std::vector<std::unique_ptr<Cell[]>> chunks;
  };
  uint32_t local_id(std::string_view name, uint32_t key);
  Cell& cell(NameState& n, size_t window);
  static const Cell* find_cell(const NameState& n, size_t window);
  static double quantile(const std::vector<const LogHistogram*>& hists, double q);

  Layer layer_;
  WindowGrid grid_;
  CallWindowOptions opt_;
  std::vector<NameState> names_;
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, uint32_t, NameHash, std::equal_to<>> name_ids_;
  std::vector<uint32_t> key_ids_;  // caller's name key -> index into names_ (UINT32_MAX: not seen yet)
  size_t events_ = 0;
  std::vector<uint64_t> total_;  // per window: calls of every name
  std::vector<double> busy_ns_;  // per window
  std::vector<double> oncpu_ns_, offcpu_ns_, offcpu_n_;  // per window, from Python stack samples
  bool sampled_ = false;
};

// Window features of sampled series, fed one block run at a time (RecordingReader::for_each_sample_run).
// `target_pids`: the traced processes, to tell other processes on the GPU apart (empty: unknown, and the
// other_procs columns are left out).
//
// The online engine asks for the table every second, one row longer each time, of a node's thousand-odd series:
// table() keeps the columns and the rows it built, and the next call builds only the rows from the first window
// that samples changed since (the new windows, as a rule); a new column, a new target process or a sample that
// moves a column's first value (which the windows before it take) rebuilds them all. Not thread-safe.
class SeriesWindowFeatures {
 public:
  SeriesWindowFeatures(WindowGrid grid, std::set<uint32_t> target_pids = {});
  void add(const SeriesInfo& series, std::span<const int64_t> t_ns, std::span<const double> values);
  // A process found to be the job's after samples began (a rank a launcher started): not an "other" process.
  void add_target(uint32_t pid) {
    if (targets_.insert(pid).second) dirty_from_ = 0;
  }
  size_t series() const { return series_.size() + proc_series_; }
  // The table's first `windows` rows (all by default), equal to the whole table's first rows (see CallWindowFeatures).
  WindowFeatureTable table(size_t windows = SIZE_MAX) const;

 private:
  struct Acc {
    double sum = 0, max = -INFINITY;
    uint32_t n = 0;
  };
  struct Track {
    SeriesInfo info;
    std::vector<Acc> windows;
    size_t first_window = SIZE_MAX;  // the first window with a value: what the windows before it take
    int64_t last_t = INT64_MIN;  // counters: the previous sample
    double last_v = 0;
  };
  // Per-process NVML samples: (gpu, pid, window) -> window means.
  struct ProcAcc {
    Acc sm, mem;
    bool seen = false;
  };
  WindowGrid grid_;
  std::set<uint32_t> targets_;
  std::map<SeriesId, Track> series_;
  using GpuProcs = std::map<uint32_t, std::vector<ProcAcc>>;  // pid -> windows
  std::map<std::string, GpuProcs> procs_;                        // by gpu
  std::map<std::string, size_t> procs_first_window_;             // by gpu: the first window a process was seen in
  size_t proc_series_ = 0;
  std::set<SeriesId> proc_series_ids_;

  // A column of the table, with or without values so far: a series' mean (or rate) or max, or one of a GPU's
  // process columns (kProc*).
  struct Column {
    std::string name;
    const Track* track = nullptr;
    bool max = false;
    const GpuProcs* procs = nullptr;
    size_t first_window = SIZE_MAX;  // procs: as procs_first_window_
    int proc = 0;
  };
  double value_at(const Column& c, size_t w) const;  // NaN: no value of its own in window w
  void mark_changed(size_t window, size_t first_window);
  void lay_out() const;
  // What table() built: every column, and per column its rows so far (carried forward; NaN: the column has no
  // value yet) and which rows had a value of their own. Rows before dirty_from_ still hold.
  mutable std::vector<Column> columns_;
  mutable std::vector<std::string> subjects_;
  mutable std::vector<std::vector<double>> rows_;
  mutable std::vector<std::vector<uint8_t>> own_;
  mutable size_t built_ = 0;       // rows built
  mutable size_t dirty_from_ = 0;  // the first row a sample changed since (0: the columns too)
};

// The table with exactly `columns`, in that order (the header of a table made from another recording, so that
// `detect` can train on one recording and score another). A column this recording lacks gets the value it
// would have had without data: 0 for counts, bytes and totals (LAYER.log10_calls, .log10_count, .log10_bytes,
// .busy_fraction, .oncpu_fraction, .offcpu_fraction, .log10_offcpu_count), otherwise `reference_median` of that
// column (the other recording's typical value); it is counted as filled in every window. Columns not in `columns` are dropped.
WindowFeatureTable conform_columns(const WindowFeatureTable& table, const std::vector<std::string>& columns,
                                   const std::map<std::string, double>& reference_median);

}  // namespace stackscope::analyze
