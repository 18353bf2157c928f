#include "model/sampled_count.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

namespace stackscope {

namespace {

// Added to the jackknife's error: what the windows' spread cannot show (the operators' mix outside the counted
// windows taken as inside them, calls in flight at the windows' edges): a 100 us operator's estimate was 0.4-4.8 %
// low in 8 of 10 runs with a jackknife error of 0-2 % (TraceCost.BudgetDutyCyclesHotFamilyAndCountsScale).
constexpr double kModelError = 0.05;

// A window whose job used less CPU than this share of it tells nothing of whether the job was calling.
constexpr double kIdleWindowCpu = 0.1;

bool is_window(const SampledSpan& s) { return s.kind != SampledSpanKind::unwatched; }

// What the estimate is computed with.
struct Setup {
  int traps = 2;        // hits a call makes in a counted window
  double share = 0;     // of the calls, those entry_subset windows see
};

// The estimators' common reading of their arguments (a share outside (0, 1) means no subset windows).
Setup make_setup(double subset_share, int traps_per_counted_call) {
  return {std::max(1, traps_per_counted_call), subset_share > 0 && subset_share < 1 ? subset_share : 0};
}

// The share of the calls whose entry an entry-only or subset window trapped (0: unknown, the window says nothing).
double share_of(const SampledSpan& s, const Setup& u) {
  if (s.kind == SampledSpanKind::entry_only) return s.share >= 0 ? std::min(1.0, s.share) : 1;
  if (s.kind == SampledSpanKind::entry_subset) return s.share >= 0 ? std::min(1.0, s.share) : u.share;
  return 0;
}

double calls_of(const SampledSpan& s, const Setup& u) {
  if (s.kind == SampledSpanKind::counted) return static_cast<double>(s.hits) / u.traps;
  const double share = share_of(s, u);
  return share > 0 ? static_cast<double>(s.hits) / share : 0;
}

// What the windows say of the job: the CPU a call takes (a) and a trap (p), or, for the wall-time fallback, the
// calls per watched ns.
struct Fit {
  double f = 0, a = 0, p = 0, rate_watched = 0;
  bool entry_traps = false;
  std::string why_wall;  // empty: a and p hold
};

// Least squares over the windows with calls: cpu = F + a calls + p hits. F is what a window costs the job whatever
// its calls (the first traps after an attach find cold caches and kernel structures): without it, that cost is
// charged to the calls, a reads high and the unwatched calls low (18-20 % on the tiny-operator loop). Window lengths
// vary (the gates alternate short and long ones) so that F and a can be told apart. Where the fit gives F < 0 it is
// refitted without F.
bool solve_least_squares(const std::vector<std::array<double, 4>>& rows, bool intercept, double& f, double& a,
                         double& p) {
  // Normal equations over the columns (1, calls, hits) or (calls, hits); rows: {1, calls, hits, cpu}.
  const int k = intercept ? 3 : 2, first = intercept ? 0 : 1;
  double m[3][4] = {};
  for (auto& r : rows)
    for (int i = 0; i < k; ++i) {
      for (int j = 0; j < k; ++j) m[i][j] += r[static_cast<size_t>(first + i)] * r[static_cast<size_t>(first + j)];
      m[i][3] += r[static_cast<size_t>(first + i)] * r[3];
    }
  for (int c = 0; c < k; ++c) {  // Gauss-Jordan with partial pivoting
    int piv = c;
    for (int r = c + 1; r < k; ++r)
      if (std::abs(m[r][c]) > std::abs(m[piv][c])) piv = r;
    if (std::abs(m[piv][c]) < 1e-12 * (std::abs(m[0][0]) + 1)) return false;
    for (int j = 0; j < 4; ++j) std::swap(m[c][j], m[piv][j]);
    for (int r = 0; r < k; ++r) {
      if (r == c) continue;
      const double q = m[r][c] / m[c][c];
      for (int j = 0; j < 4; ++j) m[r][j] -= q * m[c][j];
    }
  }
  double x[3] = {};
  for (int i = 0; i < k; ++i) x[i] = m[i][3] / m[i][i];
  f = intercept ? x[0] : 0;
  a = x[intercept ? 1 : 0];
  p = x[intercept ? 2 : 1];
  return true;
}

Fit fit_windows(std::span<const SampledSpan> spans, const Setup& u, std::span<const bool> skip = {}) {
  Fit f;
  double wall_windows = 0, calls_windows = 0, n1 = 0, n2 = 0, n_subset = 0;
  bool cpu_known = true;
  for (size_t i = 0; i < spans.size(); ++i)
    if (spans[i].kind == SampledSpanKind::entry_subset && (skip.empty() || !skip[i])) n_subset += calls_of(spans[i], u);
  // With subset windows, only entry traps: the fit's windows are the entry-only ones.
  const bool entry_traps = n_subset > 0;
  std::vector<std::array<double, 4>> rows;
  for (size_t i = 0; i < spans.size(); ++i) {
    const SampledSpan& s = spans[i];
    if (!is_window(s) || (!skip.empty() && skip[i])) continue;
    const double calls = calls_of(s, u);
    wall_windows += static_cast<double>(s.wall_ns);
    calls_windows += calls;
    if (s.cpu_ns < 0) {
      cpu_known = false;
      continue;
    }
    if (calls <= 0) continue;  // an idle window says nothing of the CPU a call takes
    (s.kind == SampledSpanKind::counted ? n2 : n1) += calls;
    if (entry_traps && s.kind == SampledSpanKind::counted) continue;
    rows.push_back({1.0, calls, static_cast<double>(s.hits), static_cast<double>(s.cpu_ns)});
  }
  f.rate_watched = wall_windows > 0 ? calls_windows / wall_windows : 0;
  if (!cpu_known) return f.why_wall = "the job's CPU time was not read", f;
  if (n1 <= 0 || n2 <= 0) return f.why_wall = "no entry-only and counted windows with calls", f;
  f.entry_traps = entry_traps;
  bool ok = rows.size() >= 4 && solve_least_squares(rows, true, f.f, f.a, f.p) && f.f >= 0;
  if (!ok) {
    f.f = 0;
    ok = solve_least_squares(rows, false, f.f, f.a, f.p);
  }
  if (ok && f.p < 0) {  // the second trap cost nothing measurable: the calls' CPU is what the windows saw
    double cpu = 0, calls = 0;
    for (auto& r : rows) cpu += r[3] - f.f, calls += r[1];
    f.p = 0;
    f.a = cpu / calls;
  }
  // A call whose CPU grows faster than its traps explain (a <= 0) breaks the model: time scaling then.
  double c_mean = 0;
  for (auto& r : rows) c_mean += r[3] / r[1] / static_cast<double>(rows.size());
  if (!ok || f.a <= 0.02 * c_mean)
    f.why_wall = "the CPU per call grew more with the traps than a linear cost explains";
  return f;
}

// The calls of every span, the unwatched ones estimated with `f`.
SampledCountEstimate apply_fit(std::span<const SampledSpan> spans, const Setup& u, const Fit& f) {
  SampledCountEstimate e;
  e.entry_traps_only = f.entry_traps;
  e.from_cpu = f.why_wall.empty();
  e.why_wall = f.why_wall;
  if (e.from_cpu) {
    e.cpu_per_call_ns = f.a;
    e.trap_ns = f.p;
    e.window_cost_ns = f.f;
  }
  double wall_counted = 0, wall_all = 0;
  bool active = true;  // unwatched time before the first window follows a fully attached, hot family
  for (auto& s : spans) {
    const double calls = calls_of(s, u);
    wall_all += static_cast<double>(s.wall_ns);
    if (s.kind == SampledSpanKind::counted) {
      e.counted_calls += calls;
      wall_counted += static_cast<double>(s.wall_ns);
    }
    if (s.kind == SampledSpanKind::entry_only || s.kind == SampledSpanKind::entry_subset) e.entry_only_calls += calls;
    if (is_window(s)) {
      ++e.windows;
      if (s.kind != SampledSpanKind::counted && share_of(s, u) <= 0) continue;  // no share: says nothing
      // The unwatched time after a window that ran on the CPU without a call is taken as idle too; a window in
      // which the job hardly ran (a loaded machine) says nothing either way.
      if (calls > 0 || s.cpu_ns < 0 || static_cast<double>(s.cpu_ns) >= kIdleWindowCpu * static_cast<double>(s.wall_ns))
        active = calls > 0;
      continue;
    }
    if (!active) continue;
    if (e.from_cpu) {
      if (s.cpu_ns > 0)
        e.unwatched_calls += std::max(0.0, static_cast<double>(s.cpu_ns) - static_cast<double>(s.hits) * f.p) / f.a;
    } else {
      e.unwatched_calls += static_cast<double>(s.wall_ns) * f.rate_watched;
    }
  }
  e.wall_scale = wall_counted > 0 ? wall_all / wall_counted : 1;
  e.scale = e.counted_calls > 0 ? (e.counted_calls + e.entry_only_calls + e.unwatched_calls) / e.counted_calls : 1;
  return e;
}

// Student's t, 97.5 % quantile: a handful of blocks estimate the spread loosely, and 2 sigma would cover ~80 %.
double t_975(int df) {
  static const double t[] = {12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23,
                             2.20,  2.18, 2.16, 2.14, 2.13, 2.12, 2.11, 2.10, 2.09, 2.09};
  return df < 1 ? t[0] : df <= 20 ? t[df - 1] : 2.0;
}

}  // namespace

SampledCountEstimate estimate_sampled_counts(std::span<const SampledSpan> spans, double subset_share,
                                             int traps_per_counted_call) {
  const Setup u = make_setup(subset_share, traps_per_counted_call);
  const Fit fit = fit_windows(spans, u);
  SampledCountEstimate e = apply_fit(spans, u, fit);
  // The error (95 %): a jackknife over blocks of four windows (one of each kind and length where they alternate). Each replicate fits
  // a and p (or the watched rate) without one block and applies them to every span; the unwatched spans' CPU is
  // measured, so the spread is that of what the windows say of a call, phases of the job included.
  std::vector<size_t> block_of(spans.size(), 0);
  size_t blocks = 0;
  int windows = 0;
  for (size_t i = 0; i < spans.size(); ++i) {
    if (is_window(spans[i]) && windows++ % 4 == 0) ++blocks;
    block_of[i] = blocks;  // 0: unwatched time before the first window (no window to leave out)
  }
  if (blocks < 3 || e.counted_calls <= 0) {
    e.error = 1.0;  // too few windows to say: stated as 100 %
    return e;
  }
  std::vector<double> replicates;
  std::unique_ptr<bool[]> skip(new bool[spans.size()]);
  for (size_t j = 1; j <= blocks; ++j) {
    for (size_t i = 0; i < spans.size(); ++i) skip[i] = block_of[i] == j;
    const Fit f = fit_windows(spans, u, {skip.get(), spans.size()});
    if (f.why_wall.empty() != fit.why_wall.empty()) {  // the model holds without some block and not without others
      e.error = 1.0;
      return e;
    }
    replicates.push_back(apply_fit(spans, u, f).scale);
  }
  const double k = static_cast<double>(replicates.size());
  double mean = 0, ss = 0;
  for (double r : replicates) mean += r / k;
  for (double r : replicates) ss += (r - mean) * (r - mean);
  e.error = t_975(static_cast<int>(k) - 1) * std::sqrt((k - 1) / k * ss) / e.scale + kModelError;
  return e;
}

namespace {

// What makes the syncs' estimate usable. A loop's steps make the same calls: its windows' calls per interval agree
// within a few % (a window cutting two unequal intervals of a step at odd places: ~5 %); 25 % is a job whose syncs
// do not follow its steps (a sync every few steps at random, a data-dependent loop).
// Each window's calls per interval averages its intervals: at least three a window on average, four windows. On the
// H100's inference loop the default budget's windows (25-100 ms) hold 2-10 steps of ~10 ms while watched.
constexpr int kSyncMinWindows = 4;
constexpr uint64_t kSyncMinIntervals = 12;
constexpr double kSyncMaxSpread = 0.25;
// Calls of processes that made no sync in their window (a data loader's worker) are not in step with the syncs.
constexpr double kSyncMinCoverage = 0.9;

// The unwatched calls with calls-per-interval `c` (every call where `skip` leaves a window out still counts).
double unwatched_from_syncs(std::span<const SampledSpan> spans, double c) {
  double syncs = 0;
  for (auto& s : spans)
    if (s.kind == SampledSpanKind::unwatched) syncs += static_cast<double>(std::max<int64_t>(0, s.syncs));
  return c * syncs;
}

}  // namespace

SyncIntervalEstimate estimate_from_sync_intervals(std::span<const SampledSpan> spans, double subset_share,
                                                  int traps_per_counted_call) {
  const Setup u = make_setup(subset_share, traps_per_counted_call);
  SyncIntervalEstimate e;
  double calls = 0, captured = 0, syncing = 0;
  bool known = !spans.empty();
  std::vector<size_t> block_of(spans.size(), 0);
  size_t blocks = 0;
  int windows = 0;
  for (size_t i = 0; i < spans.size(); ++i) {
    const SampledSpan& s = spans[i];
    if (is_window(s) && windows++ % 4 == 0) ++blocks;
    block_of[i] = blocks;
    known = known && s.syncs >= 0;
    if (s.kind == SampledSpanKind::counted) e.counted_calls += calls_of(s, u);
    if (s.kind == SampledSpanKind::entry_only || s.kind == SampledSpanKind::entry_subset)
      e.entry_only_calls += calls_of(s, u);
    if (s.kind == SampledSpanKind::unwatched) e.unwatched_syncs += static_cast<double>(std::max<int64_t>(0, s.syncs));
    if (s.kind != SampledSpanKind::counted) continue;
    e.counted_syncs += static_cast<double>(std::max<int64_t>(0, s.syncs));
    captured += s.captured_calls;
    syncing += s.syncing_calls;
    if (s.sync_intervals == 0) continue;
    ++e.windows;
    e.intervals += s.sync_intervals;
    calls += s.interval_calls;
  }
  e.coverage = captured > 0 ? syncing / captured : 0;
  if (!known) return e.why_not = "synchronisations not counted", e;
  if (e.windows == 0 || e.counted_calls <= 0) return e.why_not = "no counted window with two synchronisations", e;
  e.calls_per_interval = calls / static_cast<double>(e.intervals);
  double ss = 0;  // the windows' calls per interval about the pooled one, weighted by their intervals
  for (auto& s : spans)
    if (s.kind == SampledSpanKind::counted && s.sync_intervals > 0) {
      const double d = s.interval_calls / static_cast<double>(s.sync_intervals) - e.calls_per_interval;
      ss += static_cast<double>(s.sync_intervals) * d * d;
    }
  e.spread = e.calls_per_interval > 0 ? std::sqrt(ss / static_cast<double>(e.intervals)) / e.calls_per_interval : 0;
  e.unwatched_calls = unwatched_from_syncs(spans, e.calls_per_interval);
  e.scale = (e.counted_calls + e.entry_only_calls + e.unwatched_calls) / e.counted_calls;
  // The error: a jackknife over blocks of four windows (the CPU estimate's), each replicate's calls per interval
  // pooled without one block.
  std::vector<double> replicates;
  for (size_t j = 1; j <= blocks; ++j) {
    double c = 0;
    uint64_t n = 0;
    for (size_t i = 0; i < spans.size(); ++i)
      if (block_of[i] != j && spans[i].kind == SampledSpanKind::counted) {
        c += spans[i].interval_calls;
        n += spans[i].sync_intervals;
      }
    if (n == 0) continue;
    const double unwatched = unwatched_from_syncs(spans, c / static_cast<double>(n));
    replicates.push_back((e.counted_calls + e.entry_only_calls + unwatched) / e.counted_calls);
  }
  if (replicates.size() >= 3) {
    const double k = static_cast<double>(replicates.size());
    double mean = 0, rss = 0;
    for (double r : replicates) mean += r / k;
    for (double r : replicates) rss += (r - mean) * (r - mean);
    e.error = t_975(static_cast<int>(k) - 1) * std::sqrt((k - 1) / k * rss) / e.scale + kModelError;
  }
  if (e.calls_per_interval > 0 && e.counted_syncs > 0) {
    e.unaccounted = e.counted_calls / (e.calls_per_interval * e.counted_syncs) - 1;
    e.unaccounted_in_error = std::abs(e.unaccounted) > kModelError;
    if (e.unaccounted_in_error) e.error += std::abs(e.unaccounted);
  }
  auto pct = [](double x) { return std::to_string(std::lround(100 * x)) + "%"; };
  if (e.windows < kSyncMinWindows || e.intervals < kSyncMinIntervals || replicates.size() < 3)
    e.why_not = std::to_string(e.windows) + " counted window(s) with " + std::to_string(e.intervals) +
                " complete interval(s) between synchronisations (at least " + std::to_string(kSyncMinWindows) +
                " and " + std::to_string(kSyncMinIntervals) + ", in three blocks of four windows)";
  else if (e.spread > kSyncMaxSpread)
    e.why_not = "calls per interval between synchronisations vary by " + pct(e.spread) +
                " across windows (at most " + pct(kSyncMaxSpread) + ")";
  else if (e.coverage < kSyncMinCoverage)
    e.why_not = pct(e.coverage) + " of the counted calls by processes that synchronised in their window (at least " +
                pct(kSyncMinCoverage) + ")";
  e.usable = e.why_not.empty();
  return e;
}

SampledCallsReport estimate_sampled_calls(std::span<const SampledSpan> spans, double subset_share,
                                          int traps_per_counted_call) {
  SampledCallsReport r;
  r.cpu = estimate_sampled_counts(spans, subset_share, traps_per_counted_call);
  r.syncs = estimate_from_sync_intervals(spans, subset_share, traps_per_counted_call);
  r.from_syncs = r.syncs.usable;
  return r;
}

}  // namespace stackscope
