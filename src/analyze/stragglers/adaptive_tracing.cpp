#include "analyze/stragglers/adaptive_tracing.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace stackscope::analyze {

TracingDecision AdaptiveTracingPolicy::observe_step(std::span<const double> step_times) {
  TracingDecision d;
  std::vector<double> valid;
  for (double t : step_times)
    if (std::isfinite(t) && t >= 0) valid.push_back(t);
  if (valid.size() >= 2) {
    const double mean = std::accumulate(valid.begin(), valid.end(), 0.0) / valid.size();
    double sq = 0;
    for (double t : valid) sq += (t - mean) * (t - mean);
    d.signal = mean > 0 ? std::sqrt(sq / valid.size()) / mean : 0;
  }
  // Suspects: robustly slow workers of this step.
  std::vector<int> suspects;
  if (valid.size() >= 3) {
    std::vector<double> v = valid;
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    const double med = v[v.size() / 2];
    for (auto& x : v) x = std::abs(x - med);
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    const double scale = std::max(1.4826 * v[v.size() / 2], 1e-9 * std::max(1.0, std::abs(med)));
    for (size_t w = 0; w < step_times.size(); ++w)
      if (std::isfinite(step_times[w]) && (step_times[w] - med) / scale > opt_.suspect_z) suspects.push_back(static_cast<int>(w));
    std::sort(suspects.begin(), suspects.end(), [&](int a, int b) { return step_times[a] > step_times[b]; });
    if (static_cast<int>(suspects.size()) > opt_.max_suspects) suspects.resize(opt_.max_suspects);
  }
  const bool was_on = on_;
  if (!on_) {
    if (d.signal > opt_.on_threshold) {
      on_ = true;
      on_for_ = 0;
      calm_ = 0;
      suspects_ = suspects;
      traced_ = suspects;
      // Random healthy peers for comparison.
      std::vector<int> others;
      for (size_t w = 0; w < step_times.size(); ++w)
        if (std::find(suspects.begin(), suspects.end(), static_cast<int>(w)) == suspects.end()) others.push_back(static_cast<int>(w));
      std::shuffle(others.begin(), others.end(), rng_);
      for (int k = 0; k < opt_.random_peers && k < static_cast<int>(others.size()); ++k) traced_.push_back(others[k]);
      std::sort(traced_.begin(), traced_.end());
    }
  } else {
    ++on_for_;
    // New suspects join while tracing is on.
    for (int s : suspects)
      if (std::find(traced_.begin(), traced_.end(), s) == traced_.end()) {
        traced_.insert(std::upper_bound(traced_.begin(), traced_.end(), s), s);
        suspects_.push_back(s);
      }
    calm_ = d.signal < opt_.off_threshold ? calm_ + 1 : 0;
    if (calm_ >= opt_.calm_steps && on_for_ >= opt_.min_detailed_steps) {
      on_ = false;
      traced_.clear();
      suspects_.clear();
    }
  }
  d.detailed = on_;
  d.changed = on_ != was_on;
  d.suspects = suspects_;
  d.traced = traced_;
  return d;
}

}  // namespace stackscope::analyze
