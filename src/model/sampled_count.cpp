#include "model/sampled_count.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <vector>

namespace stackscope {

namespace {

// A window whose job used less CPU than this share of it tells nothing of whether the job was calling.
constexpr double kIdleWindowCpu = 0.1;

bool is_window(const SampledSpan& s) { return s.kind != SampledSpanKind::unwatched; }

double calls_of(const SampledSpan& s, int traps) {
  if (s.kind == SampledSpanKind::counted) return static_cast<double>(s.hits) / traps;
  if (s.kind == SampledSpanKind::entry_only) return static_cast<double>(s.hits);
  return 0;
}

// What the windows say of the job: the CPU a call takes (a) and a trap (p), or, for the wall-time fallback, the
// calls per watched ns.
struct Fit {
  double f = 0, a = 0, p = 0, rate_watched = 0;
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

Fit fit_windows(std::span<const SampledSpan> spans, int traps, std::span<const bool> skip = {}) {
  Fit f;
  double wall_windows = 0, calls_windows = 0, n1 = 0, n2 = 0;
  bool cpu_known = true;
  std::vector<std::array<double, 4>> rows;
  for (size_t i = 0; i < spans.size(); ++i) {
    const SampledSpan& s = spans[i];
    if (!is_window(s) || (!skip.empty() && skip[i])) continue;
    const double calls = calls_of(s, traps);
    wall_windows += static_cast<double>(s.wall_ns);
    calls_windows += calls;
    if (s.cpu_ns < 0) {
      cpu_known = false;
      continue;
    }
    if (calls <= 0) continue;  // an idle window says nothing of the CPU a call takes
    (s.kind == SampledSpanKind::counted ? n2 : n1) += calls;
    rows.push_back({1.0, calls, static_cast<double>(s.hits), static_cast<double>(s.cpu_ns)});
  }
  f.rate_watched = wall_windows > 0 ? calls_windows / wall_windows : 0;
  if (!cpu_known) return f.why_wall = "the job's CPU time was not read", f;
  if (n1 <= 0 || n2 <= 0) return f.why_wall = "no entry-only and counted windows with calls", f;
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
SampledCountEstimate apply_fit(std::span<const SampledSpan> spans, int traps, const Fit& f) {
  SampledCountEstimate e;
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
    const double calls = calls_of(s, traps);
    wall_all += static_cast<double>(s.wall_ns);
    if (s.kind == SampledSpanKind::counted) {
      e.counted_calls += calls;
      wall_counted += static_cast<double>(s.wall_ns);
    }
    if (s.kind == SampledSpanKind::entry_only) e.entry_only_calls += calls;
    if (is_window(s)) {
      ++e.windows;
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

}  // namespace

SampledCountEstimate estimate_sampled_counts(std::span<const SampledSpan> spans, int traps_per_counted_call) {
  const int traps = std::max(1, traps_per_counted_call);
  const Fit fit = fit_windows(spans, traps);
  SampledCountEstimate e = apply_fit(spans, traps, fit);
  // The error: a jackknife over blocks of four windows (one of each kind and length where they alternate). Each replicate fits
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
    const Fit f = fit_windows(spans, traps, {skip.get(), spans.size()});
    if (f.why_wall.empty() != fit.why_wall.empty()) {  // the model holds without some block and not without others
      e.error = 1.0;
      return e;
    }
    replicates.push_back(apply_fit(spans, traps, f).scale);
  }
  const double k = static_cast<double>(replicates.size());
  double mean = 0, ss = 0;
  for (double r : replicates) mean += r / k;
  for (double r : replicates) ss += (r - mean) * (r - mean);
  e.error = 2 * std::sqrt((k - 1) / k * ss) / e.scale;
  return e;
}

}  // namespace stackscope
