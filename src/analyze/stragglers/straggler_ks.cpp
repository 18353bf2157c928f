// Stage 1 (KAIR §III-B): each worker's execution rhythm as an empirical distribution, the pairwise
// Kolmogorov-Smirnov distance D between workers, and S_A = mean D over peers.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "analyze/robust_stats.h"
#include "analyze/stragglers/straggler.h"

namespace stackscope::analyze {

double ks_statistic(std::vector<double> a, std::vector<double> b) {
  if (a.empty() || b.empty()) return 0;
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  size_t i = 0, j = 0;
  double d = 0;
  while (i < a.size() && j < b.size()) {
    const double t = std::min(a[i], b[j]);
    while (i < a.size() && a[i] <= t) ++i;
    while (j < b.size() && b[j] <= t) ++j;
    d = std::max(d, std::abs(double(i) / a.size() - double(j) / b.size()));
  }
  return d;
}

namespace {

// The mean of every value; 0 for an empty sample (a worker without data), unlike robust_stats.h's mean_of().
double mean_or_zero(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / double(v.size());
}

// The ECDFs of `members` evaluated on a grid of pooled quantiles, one column per member.
// The grid holds every distinct pooled value (exact D) when that fits, else pooled quantiles; the pairwise
// comparisons (pairs x grid points) are kept under a fixed budget so that 4,096 workers stay fast.
Eigen::MatrixXf ecdf_columns(const std::vector<std::vector<double>>& samples, const std::vector<int>& members,
                             int grid_points, double pairs, bool fixed_windows) {
  grid_points = static_cast<int>(std::clamp(8e6 / std::max(pairs, 1.0), 32.0, double(grid_points)));
  std::vector<double> pooled;
  size_t total = 0;
  for (int w : members) total += samples[w].size();
  const size_t stride = std::max<size_t>(1, total / 50000);
  size_t k = 0;
  for (int w : members)
    for (double v : samples[w])
      if (k++ % stride == 0) pooled.push_back(v);
  std::sort(pooled.begin(), pooled.end());
  std::vector<double> grid;
  if (fixed_windows && pooled.size() > 1 && pooled.back() > pooled.front()) {
    const int bins = std::min(grid_points, 64);
    for (int g = 1; g <= bins; ++g) grid.push_back(pooled.front() + (pooled.back() - pooled.front()) * g / bins);
  } else if (pooled.size() <= static_cast<size_t>(grid_points))
    grid = pooled;
  else
    for (int g = 0; g < grid_points; ++g)
      grid.push_back(pooled[std::min(pooled.size() - 1, (pooled.size() - 1) * g / std::max(1, grid_points - 1))]);
  grid.push_back(std::numeric_limits<double>::infinity());  // everything is <= +inf
  grid.erase(std::unique(grid.begin(), grid.end()), grid.end());
  Eigen::MatrixXf cdf = Eigen::MatrixXf::Zero(static_cast<Eigen::Index>(grid.size()), members.size());
  std::vector<float> count(grid.size());
  for (size_t m = 0; m < members.size(); ++m) {
    const auto& s = samples[members[m]];
    std::fill(count.begin(), count.end(), 0.f);
    for (double v : s) count[std::lower_bound(grid.begin(), grid.end(), v) - grid.begin()] += 1;
    float run = 0;
    for (size_t g = 0; g < grid.size(); ++g) cdf(g, m) = (run += count[g]) / float(s.size());
  }
  return cdf;
}

size_t group_size(const std::vector<int>& group, int g, size_t n) {
  if (group.empty()) return n;
  return static_cast<size_t>(std::count(group.begin(), group.end(), g));
}

// Per group, the median of `v` over the group's workers that have data.
std::vector<double> group_medians(const std::vector<double>& v, const std::vector<int>& group) {
  std::vector<std::vector<double>> by;
  for (size_t w = 0; w < v.size(); ++w) {
    const int g = group.empty() ? 0 : group[w];
    if (g >= static_cast<int>(by.size())) by.resize(g + 1);
    by[g].push_back(v[w]);
  }
  std::vector<double> out;
  for (auto& x : by) out.push_back(median_of(x));
  return out;
}

// Whether each worker's central value lies above the median of its group's.
std::vector<bool> slower_than_group(const std::vector<double>& medians, const std::vector<int>& group,
                                    const std::vector<std::vector<double>>& samples) {
  std::vector<std::vector<double>> by;
  for (size_t w = 0; w < medians.size(); ++w) {
    const int g = group.empty() ? 0 : group[w];
    if (g >= static_cast<int>(by.size())) by.resize(g + 1);
    if (!samples[w].empty()) by[g].push_back(medians[w]);
  }
  std::vector<double> gm;
  for (auto& x : by) gm.push_back(median_of(x));
  std::vector<bool> out(medians.size(), false);
  for (size_t w = 0; w < medians.size(); ++w)
    out[w] = !samples[w].empty() && medians[w] > gm[group.empty() ? 0 : group[w]];
  return out;
}

}  // namespace

std::vector<double> ks_abnormality(const std::vector<std::vector<double>>& samples, const std::vector<int>& group,
                                   const KsOptions& options, Eigen::MatrixXf* d_matrix) {
  const size_t n = samples.size();
  std::vector<double> score(n, 0);
  if (d_matrix) *d_matrix = Eigen::MatrixXf::Zero(n, n);
  std::vector<std::vector<int>> members;
  for (size_t w = 0; w < n; ++w) {
    if (samples[w].empty()) continue;
    const int g = group.empty() ? 0 : group[w];
    if (g >= static_cast<int>(members.size())) members.resize(g + 1);
    members[g].push_back(static_cast<int>(w));
  }
  std::mt19937_64 rng(options.seed);
  for (auto& m : members) {
    const int k = static_cast<int>(m.size());
    if (k < 2) continue;
    const double pairs = double(k) * std::min(k - 1, options.max_peers) / 2;
    const Eigen::MatrixXf cdf = ecdf_columns(samples, m, options.grid_points, pairs, options.fixed_windows);
    auto dist = [&](int a, int b) { return double((cdf.col(a) - cdf.col(b)).cwiseAbs().maxCoeff()); };
    if (k - 1 <= options.max_peers || d_matrix) {
      std::vector<double> sum(k, 0);
      for (int a = 0; a < k; ++a)
        for (int b = a + 1; b < k; ++b) {
          const double d = dist(a, b);
          sum[a] += d;
          sum[b] += d;
          if (d_matrix) (*d_matrix)(m[a], m[b]) = (*d_matrix)(m[b], m[a]) = static_cast<float>(d);
        }
      for (int a = 0; a < k; ++a) score[m[a]] = sum[a] / (k - 1);
    } else {
      // Many workers: S_A estimated over a random set of peers (its standard error shrinks as 1/sqrt(peers)).
      std::uniform_int_distribution<int> pick(1, k - 1);
      for (int a = 0; a < k; ++a) {
        double sum = 0;
        for (int p = 0; p < options.max_peers; ++p) sum += dist(a, (a + pick(rng)) % k);
        score[m[a]] = sum / options.max_peers;
      }
    }
  }
  return score;
}

Stage1Result stage1_rhythm(const std::vector<std::vector<std::vector<double>>>& samples,
                           const std::vector<int32_t>& steps, const std::vector<int>& group,
                           const Stage1Options& options) {
  const size_t n = samples.size(), k = steps.size();
  Stage1Result r;
  std::vector<std::vector<double>> flat(n);
  size_t values = 0;
  for (size_t w = 0; w < n; ++w) {
    for (auto& s : samples[w]) flat[w].insert(flat[w].end(), s.begin(), s.end());
    values += flat[w].size();
  }
  r.whole_run = ks_abnormality(flat, group, options.ks);

  // Windows of consecutive steps, each holding about 10 values per worker at least.
  int win = options.window_steps;
  if (win <= 0) {
    const double per_step = (n && k) ? double(values) / double(n * k) : 1;
    win = std::max<int>(static_cast<int>(std::ceil(10 / std::max(per_step, 1e-9))), static_cast<int>(k / 20));
    win = std::max(win, 1);
  }
  // "Slower" is a larger mean value (a later completion within the step, or a longer step): the signed area
  // between two ECDFs is the difference of their means, so a shift of part of the distribution counts.
  std::vector<double> own_median(n, 0), own_mean(n, 0);
  for (size_t w = 0; w < n; ++w) {
    own_median[w] = median_of(flat[w]);
    own_mean[w] = mean_or_zero(flat[w]);
  }
  std::vector<std::vector<bool>> slower_in_window;
  for (size_t b = 0; b < k; b += win) {
    size_t e = std::min(k, b + win);
    if (k - e < static_cast<size_t>(win) / 2) e = k;  // a short tail joins the last window
    std::vector<std::vector<double>> part(n);
    for (size_t w = 0; w < n; ++w) {
      const double scale = options.self_normalize_windows && own_median[w] > 0 ? own_median[w] : 1.0;
      for (size_t s = b; s < e && s < samples[w].size(); ++s)
        for (double v : samples[w][s]) part[w].push_back(v / scale);
    }
    r.windows.push_back({steps[b], steps[e - 1], ks_abnormality(part, group, options.ks)});
    std::vector<double> med(n);
    for (size_t w = 0; w < n; ++w) med[w] = mean_or_zero(part[w]);
    slower_in_window.push_back(slower_than_group(med, group, part));
    if (e == k) break;
  }

  r.persistent.assign(n, 0);
  r.episodic.assign(n, 0);
  r.episode_window.assign(n, -1);
  r.score.assign(n, 0);
  const auto slower_whole = slower_than_group(own_mean, group, flat);
  const auto whole_median = group_medians(r.whole_run, group);
  std::vector<std::vector<double>> window_median;
  for (auto& win_scores : r.windows) window_median.push_back(group_medians(win_scores.score, group));
  for (size_t w = 0; w < n; ++w) {
    const int g = group.empty() ? 0 : group[w];
    // In a group of two, D is symmetric and the median is the value itself: the slower one carries it.
    const bool pair = group_size(group, g, n) == 2;
    if (slower_whole[w]) r.persistent[w] = pair ? r.whole_run[w] : std::max(0.0, r.whole_run[w] - whole_median[g]);
    if (r.windows.size() >= 2)
      for (size_t x = 0; x < r.windows.size(); ++x) {
        const double excess = r.windows[x].score[w] - (pair ? 0.0 : window_median[x][g]);
        if (slower_in_window[x][w] && excess > r.episodic[w]) {
          r.episodic[w] = excess;
          r.episode_window[w] = static_cast<int>(x);
        }
      }
    r.score[w] = std::max(r.persistent[w], r.episodic[w]);
  }
  r.ranking.resize(n);
  std::iota(r.ranking.begin(), r.ranking.end(), 0);
  std::stable_sort(r.ranking.begin(), r.ranking.end(), [&](int a, int b) { return r.score[a] > r.score[b]; });

  // Heatmap: the most anomalous workers and, after them, the first others, in worker order.
  const size_t shown = std::min<size_t>(n, options.heatmap_max);
  r.heatmap_workers.assign(r.ranking.begin(), r.ranking.begin() + shown);
  std::sort(r.heatmap_workers.begin(), r.heatmap_workers.end());
  std::vector<std::vector<double>> sub;
  std::vector<int> sub_group;
  for (int w : r.heatmap_workers) {
    sub.push_back(flat[w]);
    sub_group.push_back(group.empty() ? 0 : group[w]);
  }
  ks_abnormality(sub, sub_group, options.ks, &r.pairwise);
  return r;
}

}  // namespace stackscope::analyze
