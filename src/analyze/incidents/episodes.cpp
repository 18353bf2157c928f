#include "analyze/incidents/episodes.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "analyze/incidents/robust_stats.h"

namespace stackscope::analyze::incidents {

namespace {

struct Stretch {
  size_t first, last;
  size_t length() const { return last - first + 1; }
};

// Dips at a regular period (checkpoints, evaluation): at least `min_count` stretches of similar length whose
// onsets are spaced by about one period (a missed repetition, two periods, still counts). Returns their indices.
std::vector<size_t> periodic_stretches(const std::vector<Stretch>& s, size_t min_count) {
  if (s.size() < min_count) return {};
  std::vector<double> lengths;
  for (const auto& x : s) lengths.push_back(static_cast<double>(x.length()));
  const double typical = median(lengths);
  std::vector<size_t> similar;
  for (size_t i = 0; i < s.size(); ++i)
    if (lengths[i] <= 2 * typical + 1 && lengths[i] * 2 + 1 >= typical) similar.push_back(i);
  if (similar.size() < min_count) return {};
  std::vector<double> gaps;
  for (size_t k = 1; k < similar.size(); ++k)
    gaps.push_back(static_cast<double>(s[similar[k]].first - s[similar[k - 1]].first));
  const double period = *std::min_element(gaps.begin(), gaps.end());
  if (period < 3) return {};
  for (double g : gaps) {
    const double m = std::round(g / period);
    if (m < 1 || m > 3 || std::abs(g - m * period) > std::max(2.0, 0.15 * period)) return {};
  }
  return similar;
}

}  // namespace

double impact_seconds(const std::vector<double>& progress, double steady, const WindowGrid& grid, size_t first,
                      size_t last) {
  if (!(steady > 0) || first > last) return 0;
  const double width = static_cast<double>(grid.width_ns) * 1e-9;
  double lost = 0;
  for (size_t w = first; w <= last && w < progress.size(); ++w)
    lost += std::clamp(1.0 - progress[w] / steady, 0.0, 1.0) * width;
  return std::min(lost, static_cast<double>(last - first + 1) * width);
}

ProgressAnalysis analyze_progress(const std::vector<double>& p, const WindowGrid& grid, const EpisodeOptions& opt) {
  ProgressAnalysis out;
  const size_t n = p.size();
  out.low.assign(n, false);
  out.in_phase.assign(n, false);
  if (n == 0) return out;
  // Steady level: the median of the central windows, then of those among them not materially below it (so that
  // long episodes do not pull it down).
  const size_t skip = n >= 10 ? n / 10 : 0;
  std::vector<double> central(p.begin() + static_cast<std::ptrdiff_t>(skip), p.end() - static_cast<std::ptrdiff_t>(skip));
  const double first_guess = median(central);
  std::vector<double> steady_windows;
  for (double x : central)
    if (x >= (1 - opt.material_drop) * first_guess) steady_windows.push_back(x);
  out.steady = steady_windows.empty() ? first_guess : median(steady_windows);
  if (!(out.steady > 0)) return out;  // no progress at all: nothing to measure against
  out.steady_sd = std::max(robust_sd(steady_windows, out.steady), 0.01 * out.steady);
  for (size_t w = 0; w < n; ++w)
    out.low[w] = p[w] < (1 - opt.material_drop) * out.steady && out.steady - p[w] >= opt.z * out.steady_sd;
  // A sustained moderate drop in a noisy signal (an inference loop's requests vary): the mean of k windows in a
  // row has a deviation sqrt(k) times smaller, so a run whose mean is materially low at z of those deviations is
  // low, in its windows that are themselves below steady by half the material drop (the run's edges stay tight).
  for (size_t k : {3, 5, 9}) {
    if (n < k) break;
    const double need = opt.z * out.steady_sd / std::sqrt(static_cast<double>(k));
    double sum = 0;
    for (size_t w = 0; w < n; ++w) {
      sum += p[w];
      if (w >= k) sum -= p[w - k];
      if (w + 1 < k) continue;
      const double mean = sum / static_cast<double>(k);
      if (!(mean < (1 - opt.material_drop) * out.steady && out.steady - mean >= need)) continue;
      for (size_t i = w + 1 - k; i <= w; ++i)
        if (p[i] < (1 - opt.material_drop / 2) * out.steady) out.low[i] = true;
    }
  }
  if (n < 5) return out;

  const size_t edge = std::min<size_t>(opt.max_edge_windows, static_cast<size_t>(opt.max_edge_fraction * static_cast<double>(n)));
  auto add_phase = [&](PhaseKind kind, size_t first, size_t end, std::string note) {
    if (end <= first) return;
    out.phases.push_back({kind, grid.start(first), grid.start(end - 1) + grid.width_ns, std::move(note)});
    for (size_t w = first; w < end; ++w) out.in_phase[w] = true;
  };
  // Start-up: until two windows in a row are at the steady level.
  size_t s0 = 0;
  while (s0 + 1 < n && (out.low[s0] || out.low[s0 + 1])) ++s0;
  if (out.low[0] || s0 > 0) {
    s0 = std::min(s0, edge);
    add_phase(PhaseKind::startup, 0, s0, "progress below its steady level until the job got going");
  }
  // Warm-up: the climb from start-up to the steady level (not materially low any more, still clearly below).
  size_t w0 = s0;
  if (s0 > 0)
    while (w0 < std::min(n, edge) && !out.low[w0] && p[w0] < out.steady - 2 * out.steady_sd) ++w0;
  add_phase(PhaseKind::warmup, s0, w0, "progress still climbing to its steady level");
  // Shutdown: the low tail after the last two steady windows.
  size_t e0 = n;
  while (!opt.open_end && e0 > w0 + 1 && (out.low[e0 - 1] || out.low[e0 - 2])) --e0;
  if (e0 < n) {
    e0 = std::max(e0, n - std::min(edge, n - w0));
    add_phase(PhaseKind::shutdown, e0, n, "progress below its steady level as the job ended");
  }

  // Low stretches in between, merged across short gaps.
  std::vector<Stretch> stretches;
  for (size_t w = w0; w < e0; ++w) {
    if (!out.low[w]) continue;
    if (!stretches.empty() && w - stretches.back().last <= opt.merge_gap + 1)
      stretches.back().last = w;
    else
      stretches.push_back({w, w});
  }
  std::erase_if(stretches, [&](const Stretch& s) { return s.length() < opt.min_windows; });
  // The stretch as a whole must be materially slow: merged across gaps, a few low windows in a noisy signal are not.
  std::erase_if(stretches, [&](const Stretch& s) {
    double sum = 0;
    for (size_t w = s.first; w <= s.last; ++w) sum += p[w];
    return sum / static_cast<double>(s.length()) >= (1 - opt.material_drop) * out.steady;
  });
  const auto periodic = periodic_stretches(stretches, opt.min_periodic);
  std::vector<bool> is_periodic(stretches.size(), false);
  for (size_t i : periodic) is_periodic[i] = true;
  if (!periodic.empty()) {
    const double period_s = static_cast<double>(stretches[periodic[1]].first - stretches[periodic[0]].first) *
                            static_cast<double>(grid.width_ns) * 1e-9;
    for (size_t i : periodic)
      add_phase(PhaseKind::periodic, stretches[i].first, stretches[i].last + 1,
                fmt::format("recurring dip, about every {:.0f} s (checkpoint or evaluation)", period_s));
  }
  for (size_t i = 0; i < stretches.size(); ++i)
    if (!is_periodic[i]) out.episodes.push_back({stretches[i].first, stretches[i].last});
  std::sort(out.phases.begin(), out.phases.end(), [](const Phase& a, const Phase& b) { return a.start_ns < b.start_ns; });
  return out;
}

}  // namespace stackscope::analyze::incidents
