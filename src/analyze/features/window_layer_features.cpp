#include "analyze/features/window_layer_features.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "analyze/detectors/thresholds.h"
#include "analyze/features/window_limits.h"


namespace stackscope::analyze {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double log10_at_least_1(double v) { return std::log10(std::max(v, 1.0)); }

// Column names go into a CSV header: no separators, quotes or line breaks.
std::string column_safe(std::string s) {
  for (char& c : s)
    if (c == ',' || c == '"' || c == '\n' || c == '\r' || c == ' ' || c == '\t') c = '_';
  return s;
}

// One column being built: values per window, NaN where the window had no data yet.
struct ColumnBuilder {
  std::string name;
  std::vector<double> values;
};

WindowFeatureTable assemble(const WindowGrid& grid, std::vector<ColumnBuilder> cols, std::vector<size_t> filled,
                            std::vector<std::string> subjects) {
  WindowFeatureTable t;
  t.grid = grid;
  t.values.resize(static_cast<Eigen::Index>(grid.count), static_cast<Eigen::Index>(cols.size()));
  for (size_t c = 0; c < cols.size(); ++c) {
    t.columns.push_back(column_safe(cols[c].name));
    for (size_t w = 0; w < grid.count; ++w)
      t.values(static_cast<Eigen::Index>(w), static_cast<Eigen::Index>(c)) = cols[c].values[w];
  }
  t.filled = std::move(filled);
  t.subjects = std::move(subjects);
  return t;
}

}  // namespace

std::optional<size_t> WindowGrid::index_of(int64_t t_ns) const {
  if (width_ns <= 0 || t_ns < first_ns) return std::nullopt;
  const auto i = static_cast<size_t>((t_ns - first_ns) / width_ns);
  if (i >= count) return std::nullopt;
  return i;
}

WindowGrid make_window_grid(int64_t first_ns, int64_t last_ns, int64_t width_ns) {
  if (width_ns <= 0) throw std::invalid_argument("window width must be > 0 ns, got " + std::to_string(width_ns));
  if (last_ns < first_ns)
    throw std::invalid_argument("window grid: last time " + std::to_string(last_ns) + " is before the first " +
                                std::to_string(first_ns));
  check_window_count(last_ns - first_ns, width_ns, "window");
  const auto whole = static_cast<size_t>((last_ns - first_ns) / width_ns);
  return {first_ns, width_ns, std::max<size_t>(whole, 1)};
}

const std::vector<std::string>& cuda_sync_and_memory_calls() {
  static const std::vector<std::string> names{
      "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaStreamWaitEvent",
      "cudaMalloc",            "cudaFree",              "cudaMallocAsync",      "cudaFreeAsync",
      "cudaMallocHost",        "cudaFreeHost",          "cudaHostAlloc",        "cudaMallocManaged",
      "cuCtxSynchronize",      "cuStreamSynchronize",   "cuEventSynchronize",   "cuStreamWaitEvent",
      "cuMemAlloc",            "cuMemFree",             "cuMemAllocAsync",      "cuMemFreeAsync",
      "cuMemAllocHost",        "cuMemFreeHost",         "cuMemHostAlloc",       "cuMemAllocManaged"};
  return names;
}

// ---- call layers

namespace {

constexpr uint32_t kCountBits = 20, kCountMax = (1u << kCountBits) - 1, kMaxBin = (1u << (32 - kCountBits)) - 1;

uint32_t log_bin(double log10_value) {
  const double b = std::floor(log10_value * (1.0 / CallWindowFeatures::kLogBinWidth));
  return !(b > 0) ? 0 : b >= kMaxBin ? kMaxBin : static_cast<uint32_t>(b);  // NaN: bin 0
}
double bin_centre(uint64_t bin) { return (static_cast<double>(bin) + 0.5) * CallWindowFeatures::kLogBinWidth; }

// threshold_at_quantile's interpolation between order statistics, over values given as (bin, count) in
// increasing bin order by `for_each_bin(visit)`, visit returning false to stop; each value at its bin's centre.
template <class ForEachBin>
double quantile_of_bins(uint64_t n, double q, ForEachBin&& for_each_bin) {
  const double pos = q * static_cast<double>(n - 1);
  const auto lo = static_cast<uint64_t>(std::floor(pos));
  const uint64_t hi = std::min(lo + 1, n - 1);
  double a = kNaN, b = kNaN;
  uint64_t seen = 0;
  for_each_bin([&](uint64_t bin, uint64_t count) {
    if (std::isnan(a) && lo < seen + count) a = bin_centre(bin);
    if (hi < seen + count) {
      b = bin_centre(bin);
      return false;
    }
    seen += count;
    return true;
  });
  return hi == lo ? a : a + (pos - static_cast<double>(lo)) * (b - a);
}

}  // namespace

void CallWindowFeatures::LogHistogram::add(double log10_value) {
  const auto f = static_cast<float>(log10_value);
  if (!binned) {
    if (entries.size() < kExactValues) {
      entries.push_back(std::bit_cast<uint32_t>(f));
      return;
    }
    std::vector<uint32_t> exact;
    exact.swap(entries);
    binned = true;
    for (uint32_t bits : exact) add_binned(std::bit_cast<float>(bits));
  }
  add_binned(f);
}

void CallWindowFeatures::LogHistogram::add_binned(float log10_value) {
  const uint32_t bin = log_bin(log10_value);
  auto it = std::lower_bound(entries.begin(), entries.end(), bin << kCountBits);
  while (it != entries.end() && (*it >> kCountBits) == bin && (*it & kCountMax) == kCountMax) ++it;
  if (it != entries.end() && (*it >> kCountBits) == bin)
    ++*it;
  else
    entries.insert(it, (bin << kCountBits) | 1);
}

uint64_t CallWindowFeatures::LogHistogram::total() const {
  if (!binned) return entries.size();
  uint64_t n = 0;
  for (uint32_t e : entries) n += e & kCountMax;
  return n;
}

CallWindowFeatures::CallWindowFeatures(Layer layer, WindowGrid grid, CallWindowOptions options)
    : layer_(layer),
      grid_(grid),
      opt_(std::move(options)),
      total_(grid.count, 0),
      busy_ns_(grid.count, 0.0),
      oncpu_ns_(grid.count, 0.0),
      offcpu_ns_(grid.count, 0.0),
      offcpu_n_(grid.count, 0.0) {}

CallRecord call_record_of(const Event& e) {
  CallRecord c = call_record_header(e);
  c.name = e.name;
  const ArgValue* sample = e.arg("sample");
  c.sample = sample != nullptr;
  c.offcpu = sample && std::holds_alternative<std::string>(*sample) && std::get<std::string>(*sample) == "off-cpu";
  c.depth = e.arg_int("depth", 0);
  if (e.arg("bytes")) c.bytes = static_cast<double>(std::max<int64_t>(e.arg_int("bytes", 0), 0));
  return c;
}

void CallWindowFeatures::add(const Event& e) {
  if (e.layer != layer_) return;
  add(call_record_of(e));
}

uint32_t CallWindowFeatures::local_id(std::string_view name, uint32_t key) {
  if (key != CallRecord::kNoNameKey && key < key_ids_.size() && key_ids_[key] != UINT32_MAX) return key_ids_[key];
  uint32_t id;
  if (auto it = name_ids_.find(name); it != name_ids_.end()) {
    id = it->second;
  } else {
    id = static_cast<uint32_t>(names_.size());
    names_.push_back({std::string(name), 0, false, {}});
    name_ids_.emplace(std::string(name), id);
  }
  if (key != CallRecord::kNoNameKey) {
    if (key >= key_ids_.size()) key_ids_.resize(static_cast<size_t>(key) + 1, UINT32_MAX);
    key_ids_[key] = id;
  }
  return id;
}

CallWindowFeatures::Cell& CallWindowFeatures::cell(NameState& n, size_t window) {
  if (n.chunks.empty()) n.chunks.resize((grid_.count + kChunk - 1) / kChunk);
  auto& chunk = n.chunks[window / kChunk];
  if (!chunk) chunk = std::make_unique<Cell[]>(kChunk);
  return chunk[window % kChunk];
}

const CallWindowFeatures::Cell* CallWindowFeatures::find_cell(const NameState& n, size_t window) {
  if (n.chunks.empty() || !n.chunks[window / kChunk]) return nullptr;
  return &n.chunks[window / kChunk][window % kChunk];
}

void CallWindowFeatures::add(const CallRecord& c) {
  if (c.layer != layer_) return;
  sampled_ = sampled_ || c.sample;
  // Busy time of outermost calls (or a sample's on-/off-CPU time), spread over the windows the event overlaps.
  std::vector<double>* spread = c.sample ? (c.offcpu ? &offcpu_ns_ : &oncpu_ns_) : c.depth == 0 ? &busy_ns_ : nullptr;
  if (c.timed && c.duration_ns > 0 && spread) {
    const int64_t end = c.start_ns + c.duration_ns;
    for (auto w = grid_.index_of(std::max(c.start_ns, grid_.first_ns)); w && *w < grid_.count; w = *w + 1) {
      const int64_t lo = std::max(c.start_ns, grid_.start(*w)), hi = std::min(end, grid_.end(*w));
      if (hi <= lo) break;
      (*spread)[*w] += static_cast<double>(hi - lo);
    }
  }
  const auto window = grid_.index_of(c.start_ns);
  if (!window) return;
  ++events_;
  ++total_[*window];
  if (c.offcpu) offcpu_n_[*window] += 1;
  NameState& n = names_[local_id(c.name, c.name_key)];
  ++n.count;
  Cell& cl = cell(n, *window);
  ++cl.count;
  if (c.bytes >= 0) {
    n.has_bytes = true;
    cl.bytes += c.bytes;
  }
  if (c.timed) {
    const double dur = static_cast<double>(std::max<int64_t>(c.duration_ns, 1));
    cl.lat.add(log10_at_least_1(dur));
    if (c.bytes >= 0 && layer_ == Layer::nccl) cl.bw.add(log10_at_least_1(c.bytes / (dur * 1e-9)));
  }
}

double CallWindowFeatures::quantile(const std::vector<const LogHistogram*>& hists, double q) {
  // One window's few exact values (the table's cells, every pass online): sorted on the stack, the same order
  // statistics and interpolation as threshold_at_quantile below, without its two copies on the heap.
  if (hists.size() == 1 && !hists.front()->binned && !hists.front()->entries.empty() &&
      hists.front()->entries.size() <= kExactValues) {
    std::array<double, kExactValues> v;
    const size_t n = hists.front()->entries.size();
    bool finite = true;
    for (size_t i = 0; i < n; ++i) {
      v[i] = std::bit_cast<float>(hists.front()->entries[i]);
      finite = finite && std::isfinite(v[i]);
    }
    if (finite) {
      std::sort(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n));
      const double pos = q * static_cast<double>(n - 1);
      const auto lo = static_cast<size_t>(std::floor(pos));
      const size_t hi = std::min(lo + 1, n - 1);
      return hi == lo ? v[lo] : v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
    }
  }
  uint64_t n = 0;
  bool exact = true;
  for (const LogHistogram* h : hists) {
    n += h->total();
    exact = exact && !h->binned;
  }
  if (exact && n <= kExactOverall) {  // the values themselves, as before
    std::vector<double> v;
    v.reserve(n);
    for (const LogHistogram* h : hists)
      for (uint32_t bits : h->entries) v.push_back(std::bit_cast<float>(bits));
    return threshold_at_quantile(std::span<const double>(v), q);
  }
  if (hists.size() == 1) {
    const auto& e = hists.front()->entries;
    return quantile_of_bins(n, q, [&](auto&& visit) {
      for (uint32_t x : e)
        if (!visit(x >> kCountBits, x & kCountMax)) return;
    });
  }
  std::vector<uint64_t> dense(kMaxBin + 1, 0);
  for (const LogHistogram* h : hists)
    for (uint32_t x : h->entries) {
      if (h->binned)
        dense[x >> kCountBits] += x & kCountMax;
      else
        ++dense[log_bin(std::bit_cast<float>(x))];
    }
  return quantile_of_bins(n, q, [&](auto&& visit) {
    for (size_t b = 0; b < dense.size(); ++b)
      if (dense[b] && !visit(b, dense[b])) return;
  });
}

WindowFeatureTable CallWindowFeatures::table(size_t windows) const {
  const std::string layer(layer_name(layer_));
  const bool nccl = layer_ == Layer::nccl;
  const size_t nw = std::min(windows, grid_.count);  // rows built; the whole grid decides names and fill values
  // Which names get columns: the most frequent, then the always-wanted ones that occur.
  std::vector<uint32_t> order(names_.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return names_[a].count != names_[b].count ? names_[a].count > names_[b].count : names_[a].name < names_[b].name;
  });
  std::set<uint32_t> chosen(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(std::min(opt_.top_names, order.size())));
  for (const std::string& n : opt_.always_names)
    if (auto it = name_ids_.find(n); it != name_ids_.end()) chosen.insert(it->second);
  std::vector<uint32_t> names(chosen.begin(), chosen.end());
  std::sort(names.begin(), names.end(), [&](uint32_t a, uint32_t b) { return names_[a].name < names_[b].name; });

  std::vector<ColumnBuilder> cols;
  std::vector<size_t> filled;
  static const Cell kEmpty{};
  // Per-window statistic of a histogram; windows without values get the median over the recording.
  auto add_stat = [&](const std::string& col, const std::vector<const Cell*>& row, LogHistogram Cell::*hist, double q) {
    std::vector<const LogHistogram*> all;
    for (const Cell* cl : row)  // every window of the grid
      if (!((*cl).*hist).entries.empty()) all.push_back(&((*cl).*hist));
    if (all.empty()) return;  // no finished call carries this quantity: no column
    const double overall = quantile(all, 0.5);
    ColumnBuilder b{col, std::vector<double>(nw)};
    size_t f = 0;
    for (size_t w = 0; w < nw; ++w) {
      const LogHistogram& h = (*row[w]).*hist;
      if (h.entries.empty()) {
        b.values[w] = overall;
        ++f;
      } else {
        b.values[w] = quantile({&h}, q);
      }
    }
    cols.push_back(std::move(b));
    filled.push_back(f);
  };
  std::vector<std::string> subjects;
  for (uint32_t id : names) {
    const NameState& ns = names_[id];
    const std::string& n = ns.name;
    subjects.push_back(n);
    std::vector<const Cell*> row(grid_.count);
    for (size_t w = 0; w < grid_.count; ++w) {
      const Cell* cl = find_cell(ns, w);
      row[w] = cl ? cl : &kEmpty;
    }
    ColumnBuilder cnt{n + ".log10_count", std::vector<double>(nw)};
    for (size_t w = 0; w < nw; ++w) cnt.values[w] = std::log10(1.0 + static_cast<double>(row[w]->count));
    cols.push_back(std::move(cnt));
    filled.push_back(0);
    add_stat(n + ".median_log10_lat_ns", row, &Cell::lat, 0.5);
    add_stat(n + ".p95_log10_lat_ns", row, &Cell::lat, 0.95);
    if (ns.has_bytes) {
      ColumnBuilder b{n + ".log10_bytes", std::vector<double>(nw)};
      for (size_t w = 0; w < nw; ++w) b.values[w] = std::log10(1.0 + row[w]->bytes);
      cols.push_back(std::move(b));
      filled.push_back(0);
      if (nccl) add_stat(n + ".median_log10_bw_Bps", row, &Cell::bw, 0.5);
    }
  }
  ColumnBuilder calls{layer + ".log10_calls", std::vector<double>(nw)};
  ColumnBuilder busy{layer + ".busy_fraction", std::vector<double>(nw)};
  for (size_t w = 0; w < nw; ++w) {
    calls.values[w] = std::log10(1.0 + static_cast<double>(total_[w]));
    busy.values[w] = busy_ns_[w] / static_cast<double>(grid_.width_ns);
  }
  cols.push_back(std::move(calls));
  cols.push_back(std::move(busy));
  filled.push_back(0);
  filled.push_back(0);
  if (sampled_) {
    const double width = static_cast<double>(grid_.width_ns);
    ColumnBuilder on{layer + ".oncpu_fraction", std::vector<double>(nw)};
    ColumnBuilder off{layer + ".offcpu_fraction", std::vector<double>(nw)};
    ColumnBuilder offn{layer + ".log10_offcpu_count", std::vector<double>(nw)};
    for (size_t w = 0; w < nw; ++w) {
      on.values[w] = oncpu_ns_[w] / width;
      off.values[w] = offcpu_ns_[w] / width;
      offn.values[w] = std::log10(1.0 + offcpu_n_[w]);
    }
    for (auto* c : {&on, &off, &offn}) {
      cols.push_back(std::move(*c));
      filled.push_back(0);
    }
  }
  WindowGrid rows = grid_;
  rows.count = nw;
  return assemble(rows, std::move(cols), std::move(filled), std::move(subjects));
}

// ---- sampled series

namespace {

bool is_utilisation(const SeriesInfo& s) { return s.name.find("util") != std::string::npos; }

// "gpu0/pid123" -> ("gpu0", 123)
std::optional<std::pair<std::string, uint32_t>> process_device(const std::string& device) {
  const auto at = device.rfind("/pid");
  if (at == std::string::npos || at + 4 >= device.size()) return std::nullopt;
  uint32_t pid = 0;
  for (size_t i = at + 4; i < device.size(); ++i) {
    if (device[i] < '0' || device[i] > '9') return std::nullopt;
    pid = pid * 10 + static_cast<uint32_t>(device[i] - '0');
  }
  return std::pair{device.substr(0, at), pid};
}

}  // namespace

SeriesWindowFeatures::SeriesWindowFeatures(WindowGrid grid, std::set<uint32_t> target_pids)
    : grid_(grid), targets_(std::move(target_pids)) {}

void SeriesWindowFeatures::mark_changed(size_t window, size_t first_window) {
  // At or before the column's first value: the windows before it take that value, so every row may change.
  dirty_from_ = window <= first_window ? 0 : std::min(dirty_from_, window);
}

void SeriesWindowFeatures::add(const SeriesInfo& s, std::span<const int64_t> t, std::span<const double> v) {
  if (s.kind == SeriesKind::static_value) return;
  if (s.source == "nvml") {
    if (auto proc = process_device(s.device)) {
      const bool sm = s.name == "gpu.proc.sm_util", mem = s.name == "gpu.proc.mem.used";
      if (proc_series_ids_.insert(s.id).second) ++proc_series_;
      auto [gpu, new_gpu] = procs_.try_emplace(proc->first);
      if (new_gpu) dirty_from_ = 0;  // its columns and subject
      auto& windows = gpu->second[proc->second];
      if (windows.empty()) {
        check_window_cells(grid_.count, proc_series_ + series_.size(), sizeof(ProcAcc) + sizeof(double),
                           "series window features");
        windows.resize(grid_.count);
      }
      size_t& first = procs_first_window_.try_emplace(proc->first, SIZE_MAX).first->second;
      for (size_t i = 0; i < t.size(); ++i) {
        const auto w = grid_.index_of(t[i]);
        if (!w || !std::isfinite(v[i])) continue;
        mark_changed(*w, first);
        first = std::min(first, *w);
        ProcAcc& a = windows[*w];
        a.seen = true;
        Acc* acc = sm ? &a.sm : mem ? &a.mem : nullptr;
        if (!acc) continue;
        acc->sum += v[i];
        acc->max = std::max(acc->max, v[i]);
        ++acc->n;
      }
      return;
    }
  }
  auto [it, fresh] = series_.try_emplace(s.id);
  Track& tr = it->second;
  if (fresh) {
    // The Acc per window and series, and the double each becomes in the table.
    check_window_cells(grid_.count, series_.size() + proc_series_, sizeof(Acc) + sizeof(double),
                       "series window features");
    tr.info = s;
    tr.windows.resize(grid_.count);
    dirty_from_ = 0;  // its subject (and columns once it has a value)
  }
  const bool counter = s.kind == SeriesKind::counter;
  for (size_t i = 0; i < t.size(); ++i) {
    if (!std::isfinite(v[i])) continue;
    double x = v[i];
    if (counter) {
      const bool have_prev = tr.last_t != INT64_MIN && t[i] > tr.last_t;
      const double prev_v = tr.last_v;
      const int64_t prev_t = tr.last_t;
      if (t[i] > tr.last_t) {
        tr.last_t = t[i];
        tr.last_v = v[i];
      }
      if (!have_prev || v[i] < prev_v) continue;  // the first sample, or a reset
      x = (v[i] - prev_v) / (static_cast<double>(t[i] - prev_t) * 1e-9);
    }
    const auto w = grid_.index_of(t[i]);
    if (!w) continue;
    mark_changed(*w, tr.first_window);
    tr.first_window = std::min(tr.first_window, *w);
    Acc& a = tr.windows[*w];
    a.sum += x;
    a.max = std::max(a.max, x);
    ++a.n;
  }
}

namespace {
enum ProcColumn { kProcCount, kProcMaxSm, kOtherCount, kOtherSm, kOtherMem };
}  // namespace

double SeriesWindowFeatures::value_at(const Column& c, size_t w) const {
  if (c.track) {
    const Acc& a = c.track->windows[w];
    if (a.n == 0) return kNaN;
    return c.max ? a.max : a.sum / a.n;
  }
  double n = 0, peak = 0, on = 0, osm = 0, omem = 0;
  bool any = false;
  for (const auto& [pid, windows] : *c.procs) {
    const ProcAcc& a = windows[w];
    if (!a.seen) continue;
    any = true;
    ++n;
    const double sm = a.sm.n ? a.sm.sum / a.sm.n : 0.0;
    peak = std::max(peak, sm);
    if (!targets_.count(pid)) {
      ++on;
      osm += sm;
      omem += a.mem.n ? a.mem.sum / a.mem.n : 0.0;
    }
  }
  if (!any) return kNaN;
  switch (c.proc) {
    case kProcCount: return n;
    case kProcMaxSm: return peak;
    case kOtherCount: return on;
    case kOtherSm: return osm;
    default: return omem;
  }
}

void SeriesWindowFeatures::lay_out() const {
  columns_.clear();
  subjects_.clear();
  // Stable order: by column name, whatever order the series were declared in.
  auto prefix = [](const SeriesInfo& s) { return s.device.empty() ? s.name : s.device + "." + s.name; };
  std::vector<std::pair<std::pair<std::string, std::string>, const Track*>> tracks;
  tracks.reserve(series_.size());
  for (auto& [id, tr] : series_) tracks.push_back({{prefix(tr.info), tr.info.host}, &tr});
  std::sort(tracks.begin(), tracks.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::set<std::string> hosts;
  for (const auto& [key, tr] : tracks) hosts.insert(tr->info.host);
  for (const auto& [key, tr] : tracks) {
    const SeriesInfo& s = tr->info;
    const std::string base = key.first + (hosts.size() > 1 ? "@" + s.host : "");
    subjects_.push_back(s.key());
    columns_.push_back({column_safe(base + (s.kind == SeriesKind::counter ? ".rate_per_s" : ".mean")), tr});
    if (is_utilisation(s)) columns_.push_back({column_safe(base + ".max"), tr, true});
  }
  for (const auto& [gpu, by_pid] : procs_) {
    subjects_.push_back(gpu + "/pid*");
    const size_t first = procs_first_window_.count(gpu) ? procs_first_window_.at(gpu) : SIZE_MAX;
    const int n = targets_.empty() ? 2 : 5;  // the other processes' columns only when the job's are known
    static const char* const kNames[] = {".procs.count", ".procs.max_sm_util", ".other_procs.count",
                                         ".other_procs.sm_util", ".other_procs.mem_used"};
    for (int k = 0; k < n; ++k) columns_.push_back({column_safe(gpu + kNames[k]), nullptr, false, &by_pid, first, k});
  }
  rows_.assign(columns_.size(), {});
  own_.assign(columns_.size(), {});
  built_ = 0;
}

WindowFeatureTable SeriesWindowFeatures::table(size_t windows) const {
  const size_t nw = std::min(windows, grid_.count);  // rows wanted; the windows after them only fill leading gaps
  if (dirty_from_ == 0) lay_out();
  if (const size_t from = std::min(built_, dirty_from_); nw > from) {
    for (size_t c = 0; c < columns_.size(); ++c) {
      const Column& col = columns_[c];
      const size_t first = col.track ? col.track->first_window : col.first_window;
      // Windows without a value of their own take the previous window's; those before the first one its value.
      const double lead = first < grid_.count ? value_at(col, first) : kNaN;
      std::vector<double>& v = rows_[c];
      std::vector<uint8_t>& own = own_[c];
      v.resize(nw);
      own.resize(nw);
      for (size_t w = from; w < nw; ++w) {
        const double x = value_at(col, w);
        own[w] = !std::isnan(x);
        v[w] = own[w] ? x : w == 0 ? lead : v[w - 1];
      }
    }
    built_ = nw;
    dirty_from_ = SIZE_MAX;
  }
  WindowFeatureTable t;
  t.grid = grid_;
  t.grid.count = nw;
  t.subjects = subjects_;
  std::vector<size_t> present;  // columns with a value in some window of the grid
  for (size_t c = 0; c < columns_.size(); ++c) {
    const Column& col = columns_[c];
    if ((col.track ? col.track->first_window : col.first_window) < grid_.count) present.push_back(c);
  }
  t.values.resize(static_cast<Eigen::Index>(nw), static_cast<Eigen::Index>(present.size()));
  for (size_t k = 0; k < present.size(); ++k) {
    const size_t c = present[k];
    t.columns.push_back(columns_[c].name);
    std::copy_n(rows_[c].begin(), nw, t.values.col(static_cast<Eigen::Index>(k)).data());
    t.filled.push_back(static_cast<size_t>(std::count(own_[c].begin(), own_[c].begin() + static_cast<std::ptrdiff_t>(nw), 0)));
  }
  return t;
}

WindowFeatureTable conform_columns(const WindowFeatureTable& table, const std::vector<std::string>& columns,
                                   const std::map<std::string, double>& reference_median) {
  auto ends_with = [](const std::string& s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  WindowFeatureTable out;
  out.grid = table.grid;
  out.subjects = table.subjects;
  out.columns = columns;
  const auto rows = static_cast<Eigen::Index>(table.grid.count);
  out.values.resize(rows, static_cast<Eigen::Index>(columns.size()));
  for (size_t c = 0; c < columns.size(); ++c) {
    const auto oc = static_cast<Eigen::Index>(c);
    const auto it = std::find(table.columns.begin(), table.columns.end(), columns[c]);
    if (it != table.columns.end()) {
      const auto tc = static_cast<size_t>(it - table.columns.begin());
      out.values.col(oc) = table.values.col(static_cast<Eigen::Index>(tc));
      out.filled.push_back(table.filled[tc]);
      continue;
    }
    const std::string& n = columns[c];
    double v;
    if (ends_with(n, ".log10_count") || ends_with(n, ".log10_bytes") || ends_with(n, ".log10_calls") ||
        ends_with(n, ".busy_fraction") || ends_with(n, ".oncpu_fraction") || ends_with(n, ".offcpu_fraction") ||
        ends_with(n, ".log10_offcpu_count")) {
      v = 0;  // no call of that name here
    } else if (auto m = reference_median.find(n); m != reference_median.end()) {
      v = m->second;
    } else {
      throw std::invalid_argument("conform_columns: no reference value for column '" + n + "'");
    }
    out.values.col(oc).setConstant(v);
    out.filled.push_back(table.grid.count);
  }
  return out;
}

}  // namespace stackscope::analyze
