// NAB's own "Windowed Gaussian" baseline detector (numenta/NAB nab/detectors/gaussian/
// windowedGaussian_detector.py), re-implemented as a peer for our NAB scorer: if both land on NAB's published
// per-file scores for this detector, the scorer is right. Streaming and causal: each row is scored against the
// mean and standard deviation of the rows before it (the first 6400 rows, then a window of 6400 that slides by
// 100 rows at a time); the score is 1 - Q(|z|), the two-sided Gaussian tail, in [0.5, 1].
#pragma once
#include <cmath>
#include <vector>

namespace stackscope::eval {

class WindowedGaussianBaseline {
 public:
  static constexpr size_t kWindowSize = 6400;
  static constexpr size_t kStepSize = 100;

  double score(double x) {
    const double s = window_.empty() ? 0.0 : 1.0 - normal_tail(x);
    if (window_.size() < kWindowSize) {
      window_.push_back(x);
      update();
    } else {
      step_.push_back(x);
      if (step_.size() == kStepSize) {
        window_.erase(window_.begin(), window_.begin() + kStepSize);
        window_.insert(window_.end(), step_.begin(), step_.end());
        step_.clear();
        update();
      }
    }
    return s;
  }

  static std::vector<double> score_all(const std::vector<double>& values) {
    WindowedGaussianBaseline d;
    std::vector<double> out;
    out.reserve(values.size());
    for (double v : values) out.push_back(d.score(v));
    return out;
  }

 private:
  void update() {  // numpy.mean / numpy.std (population), std 0 -> 1e-6
    double sum = 0;
    for (double v : window_) sum += v;
    mean_ = sum / static_cast<double>(window_.size());
    double ss = 0;
    for (double v : window_) ss += (v - mean_) * (v - mean_);
    std_ = std::sqrt(ss / static_cast<double>(window_.size()));
    if (std_ == 0.0) std_ = 0.000001;
  }
  // Q(|z|): the probability of a value at least this far from the mean on its side.
  double normal_tail(double x) const {
    if (x < mean_) x = 2 * mean_ - x;
    const double z = (x - mean_) / std_;
    return 0.5 * std::erfc(z / std::sqrt(2.0));
  }

  std::vector<double> window_, step_;
  double mean_ = 0, std_ = 1;
};

}  // namespace stackscope::eval
