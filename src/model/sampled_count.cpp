#include "model/sampled_count.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

namespace stackscope {

namespace {

bool is_window(const SampledSpan& s) { return s.kind != SampledSpanKind::unwatched; }

double calls_of(const SampledSpan& s, int traps) {
  if (s.kind == SampledSpanKind::counted) return static_cast<double>(s.hits) / traps;
  if (s.kind == SampledSpanKind::entry_only) return static_cast<double>(s.hits);
  return 0;
}

// What the windows say of the job: the CPU a call takes (a) and a trap (p), or, for the wall-time fallback, the
// calls per watched ns.
struct Fit {
  double a = 0, p = 0, rate_watched = 0;
  std::string why_wall;  // empty: a and p hold
};

Fit fit_windows(std::span<const SampledSpan> spans, int traps, std::span<const bool> skip = {}) {
  Fit f;
  double cpu1 = 0, n1 = 0, cpu2 = 0, n2 = 0, wall_windows = 0, calls_windows = 0;
  bool cpu_known = true;
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
    (s.kind == SampledSpanKind::counted ? cpu2 : cpu1) += static_cast<double>(s.cpu_ns);
    (s.kind == SampledSpanKind::counted ? n2 : n1) += calls;
  }
  f.rate_watched = wall_windows > 0 ? calls_windows / wall_windows : 0;
  if (!cpu_known) return f.why_wall = "the job's CPU time was not read", f;
  if (n1 <= 0 || n2 <= 0) return f.why_wall = "no entry-only and counted windows with calls", f;
  const double c1 = cpu1 / n1, c2 = cpu2 / n2;
  f.p = c2 - c1;
  f.a = c1 - f.p;
  if (f.p < 0) {  // the second trap cost nothing measurable: the calls' CPU is what both kinds of window saw
    f.p = 0;
    f.a = (cpu1 + cpu2) / (n1 + n2);
  }
  // A call whose CPU grows faster than its traps explain (a <= 0) breaks the model: time scaling then.
  if (f.a <= 0.02 * c1) f.why_wall = "the CPU per call grew more with the traps than a linear cost explains";
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
      active = calls > 0;  // the unwatched time after an idle window is taken as idle too
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
  // The error: a jackknife over blocks of two windows (one of each kind where they alternate). Each replicate fits
  // a and p (or the watched rate) without one block and applies them to every span; the unwatched spans' CPU is
  // measured, so the spread is that of what the windows say of a call, phases of the job included.
  std::vector<size_t> block_of(spans.size(), 0);
  size_t blocks = 0;
  int windows = 0;
  for (size_t i = 0; i < spans.size(); ++i) {
    if (is_window(spans[i]) && windows++ % 2 == 0) ++blocks;
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
