#include "analyze/incidents/episodes.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <boost/math/distributions/normal.hpp>
#include <boost/math/distributions/students_t.hpp>
#include <fmt/format.h>

#include "analyze/robust_stats.h"

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

namespace {

// The windows that show the job's own pace: outside its phases and outside `excluded`.
std::vector<double> usable_windows(const std::vector<double>& p, const ProgressAnalysis& pa,
                                   const std::vector<bool>& excluded) {
  std::vector<double> usable;
  for (size_t w = 0; w < p.size(); ++w)
    if ((w >= pa.in_phase.size() || !pa.in_phase[w]) && (w >= excluded.size() || !excluded[w])) usable.push_back(p[w]);
  return usable;
}

// Too few windows to see how the job drifts (early online, a short recording).
constexpr size_t kMinDriftWindows = 20;


// run_noise_sd over the usable windows already picked out.
double noise_of_usable(const std::vector<double>& usable, const ProgressAnalysis& pa, size_t k) {
  k = std::max<size_t>(k, 1);
  const double independent = pa.steady_sd / std::sqrt(static_cast<double>(k));
  // Too few windows to see the drift: assume the worst, a drift as persistent as the stretch, so one window's
  // deviation.
  if (usable.size() < kMinDriftWindows) return std::max(independent, pa.steady_sd);
  // Means of k windows overlap: a quarter of the windows at most per mean, so that at least four of them are
  // disjoint; a longer stretch is judged by the spread of shorter means, which is larger (the safer side).
  const size_t len = std::min(k, usable.size() / 4);
  std::vector<double> means;
  double sum = 0;
  for (size_t i = 0; i < usable.size(); ++i) {
    sum += usable[i];
    if (i >= len) sum -= usable[i - len];
    if (i + 1 >= len) means.push_back(sum / static_cast<double>(len));
  }
  return std::max(independent, robust_sd(means, pa.steady));
}

}  // namespace

double run_noise_sd(const std::vector<double>& p, const ProgressAnalysis& pa, size_t k,
                    const std::vector<bool>& excluded) {
  return noise_of_usable(usable_windows(p, pa, excluded), pa, k);
}

double variation_bar(const std::vector<double>& p, const ProgressAnalysis& pa, size_t k,
                     const std::vector<bool>& excluded) {
  const std::vector<double> windows = usable_windows(p, pa, excluded);
  const double noise = noise_of_usable(windows, pa, k);
  const size_t usable = windows.size();
  if (usable >= kMinDriftWindows || !(pa.z > 0)) return pa.z * noise;
  // The deviation itself is then estimated from the few windows seen (early online: 5-15 windows after the
  // start-up), and a drop judged against it at the normal's z is told far too often: 5 of the 16 false online
  // incidents of the kept clean GPU runs are 3-5 s slowdowns of 1.2-1.4x told 12-38 s into
  // the run. Student's t with the windows' degrees of freedom, at the same tail probability, widens the bar by what
  // the estimate does not know (x2.4 at 5 windows, x1.2 at 19, for z = 3.2) and meets z as windows come.
  const double tail = boost::math::cdf(boost::math::complement(boost::math::normal(), pa.z));
  const double dof = static_cast<double>(std::max<size_t>(usable, 2) - 1);
  return boost::math::quantile(boost::math::complement(boost::math::students_t(dof), tail)) * noise;
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
  // The windows kept for the level are those above (1 - material_drop) of it: where the window-to-window noise is
  // as large as the material drop (a count of a few samples a window), that cut trims the noise itself and its
  // spread looks small. The differences of neighbouring windows measure the noise without any cut, and a level
  // shift (an episode) moves only the two at its edges: their robust spread / sqrt(2) is a floor.
  if (central.size() >= 3 && !opt.v1_thresholds) {
    std::vector<double> step;
    for (size_t i = 1; i < central.size(); ++i) step.push_back(std::abs(central[i] - central[i - 1]) / std::numbers::sqrt2);
    out.steady_sd = std::max(out.steady_sd, 1.4826 * median(std::move(step)));
  }
  // The steady level is itself an estimate, from the steady windows seen: a median of n of them is off by about
  // sd x sqrt(pi / 2n). A window (or the mean of k) is compared with it, so the deviations add: early in a run
  // online (a few windows so far) a drop must be larger to be told from the level's own error; over a whole
  // recording (hundreds of windows) the term is small.
  const double level_var =
      opt.v1_thresholds ? 0.0 : std::numbers::pi / 2 / static_cast<double>(std::max<size_t>(1, steady_windows.size()));
  // A run of n windows is tested in about 5n places (each window, and the runs of 3, 5, 9 and 17 windows ending at
  // each): z is raised so that noise alone makes a low stretch somewhere in the whole run with a chance of about
  // 5 % (Bonferroni), and never below the configured z. About 3.7 at 100 windows, 4.5 at an hour of them.
  const double tested_tail = 0.05 / (5.0 * static_cast<double>(n));
  const double z = opt.v1_thresholds
                       ? opt.z
                       : std::max(opt.z, boost::math::quantile(boost::math::complement(boost::math::normal(), tested_tail)));
  out.z = z;
  for (size_t w = 0; w < n; ++w)
    out.low[w] = p[w] < (1 - opt.material_drop) * out.steady &&
                 out.steady - p[w] >= z * out.steady_sd * std::sqrt(1 + level_var);
  // A sustained moderate drop in a noisy signal (an inference loop's requests vary): the mean of k windows in a
  // row has a deviation sqrt(k) times smaller, so a run whose mean is materially low at z of those deviations is
  // low, in its windows that are themselves below steady by half the material drop (the run's edges stay tight).
  // Runs of 17 give a long moderate drop (a second process on the GPU: 20 % for 20 s) its power under the raised z.
  // Online (open_end), a run is judged on its windows that are not low on their own: a deep drop inside it (the
  // start-up's first windows, a stall) is already an episode or a phase, and must not lend its lowness to ordinary
  // windows apart from it. With the level and noise known from the few windows so far, a run of 17 spanning the
  // start-up or the edge of a stall marked the job's slow-but-ordinary windows 10 s away as low (held-out seed 33,
  // infer: two false online incidents, 16-18 s told at 18.5 s and 21-25 s told at 52.5 s; offline, level and noise
  // from the whole run, neither). A window the whole run marks is still low when it joins a deep drop through low
  // windows (gaps of at most merge_gap): the drop's own continuation, told as early as before. Offline keeps the
  // runs over every window: the whole run's level and noise bound them.
  const bool judge_own = opt.open_end && !opt.v1_thresholds;
  const std::vector<bool> deep = out.low;
  auto mark_runs = [&](bool own_only, std::vector<bool>& low) {
    for (size_t k : {3, 5, 9, 17}) {
      if (k == 17 && opt.v1_thresholds) break;
      if (n < k) break;
      double sum = 0;
      size_t count = 0;
      for (size_t w = 0; w < n; ++w) {
        const bool own = !own_only || !deep[w];
        sum += own ? p[w] : 0.0;
        count += own;
        if (w >= k && (!own_only || !deep[w - k])) {
          sum -= p[w - k];
          --count;
        }
        if (w + 1 < k || count == 0) continue;
        const double mean = sum / static_cast<double>(count);
        const double need = z * out.steady_sd * std::sqrt(1 / static_cast<double>(count) + level_var);
        if (!(mean < (1 - opt.material_drop) * out.steady && out.steady - mean >= need)) continue;
        for (size_t i = w + 1 - k; i <= w; ++i)
          if (p[i] < (1 - opt.material_drop / 2) * out.steady) low[i] = true;
      }
    }
  };
  if (!judge_own) {
    mark_runs(false, out.low);
  } else {
    std::vector<bool> whole = deep;
    mark_runs(false, whole);
    mark_runs(true, out.low);
    // Windows the whole runs marked that join a deep drop through low windows: spread from each deep window both
    // ways across `whole`'s low windows, over gaps of at most merge_gap.
    std::vector<bool> joined = deep;
    for (int dir : {+1, -1}) {
      size_t gap = opt.merge_gap + 1;  // windows since the last joined one (past the limit: none yet)
      for (size_t i = 0; i < n; ++i) {
        const size_t w = dir > 0 ? i : n - 1 - i;
        if (deep[w] || (whole[w] && gap <= opt.merge_gap)) {
          joined[w] = joined[w] || whole[w];
          gap = 0;
        } else {
          ++gap;
        }
      }
    }
    for (size_t w = 0; w < n; ++w) out.low[w] = out.low[w] || joined[w];
  }
  if (n < 5) return out;

  const size_t edge = std::min<size_t>(opt.max_edge_windows, static_cast<size_t>(opt.max_edge_fraction * static_cast<double>(n)));
  auto add_phase = [&](PhaseKind kind, size_t first, size_t end, std::string note) {
    if (end <= first) return;
    out.phases.push_back({kind, grid.start(first), grid.start(end - 1) + grid.width_ns, std::move(note)});
    for (size_t w = first; w < end; ++w) out.in_phase[w] = true;
  };
  // Start-up: until two windows in a row are at the steady level. Online (open_end), "at the level" also means
  // within the material drop of it, not merely not low: early in a run the windows so far are mostly start-up, their
  // spread inflates the noise, and the start-up's idle windows no longer count as low; the job had not got going,
  // yet its first slow steps became an incident (held-out seed 31, cnn: 5-14 s told at 26.5 s, start-up 0-23 s
  // offline). Offline the whole run's noise keeps the start-up's windows low.
  auto at_level = [&](size_t w) {
    return !out.low[w] && (!opt.open_end || p[w] >= (1 - opt.material_drop) * out.steady);
  };
  size_t s0 = 0;
  while (s0 + 1 < n && !(at_level(s0) && at_level(s0 + 1))) ++s0;
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
