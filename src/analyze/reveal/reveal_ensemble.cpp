#include "analyze/reveal/reveal_ensemble.h"

#include <algorithm>
#include <cmath>

#include "analyze/detectors/input_checks.h"
#include "analyze/detectors/thresholds.h"

namespace stackscope::analyze {

std::string reveal_methods_label(uint8_t flags) {
  std::string out;
  auto add = [&](uint8_t bit, const char* name) {
    if (!(flags & bit)) return;
    if (!out.empty()) out += ", ";
    out += name;
  };
  add(kRevealZ, "Z");
  add(kRevealIf, "IF");
  add(kRevealMaha, "MAHA");
  return out;
}

size_t RevealEnsembleResult::flagged() const {
  return static_cast<size_t>(std::count_if(flags.begin(), flags.end(), [](uint8_t f) { return f != 0; }));
}

RevealEnsemble::RevealEnsemble(RevealEnsembleOptions options)
    : opt_(options),
      z_(ZScoreOptions{}),
      // The third value has always filled the scale floor (clang's -Wmissing-braces said so), not the eigenvalue
      // cut: a column constant in training stays an axis scaled by 1e-12 of its mean. Kept, and written as such.
      pca_(PcaMahalanobisOptions{
          .variance_fraction = options.pca_variance, .standardize = true, .floor = {.relative = 1e-12}}),
      iforest_(IsolationForestOptions{.trees = options.iforest_trees, .max_samples = 256, .seed = options.seed}) {}

Eigen::MatrixXd RevealEnsemble::select(const Eigen::MatrixXd& x) const {
  Eigen::MatrixXd out(x.rows(), static_cast<Eigen::Index>(used_.size()));
  for (size_t k = 0; k < used_.size(); ++k) out.col(static_cast<Eigen::Index>(k)) = x.col(used_[k]) / unit_(used_[k]);
  return out;
}

Eigen::VectorXd RevealEnsemble::z_score(const Eigen::MatrixXd& xs) const {
  if (!floored_ || !(opt_.z_clip > 0)) return z_.score(xs);
  return z_.z(xs).cwiseAbs().cwiseMin(opt_.z_clip).rowwise().mean();
}

void RevealEnsemble::fit(const Eigen::MatrixXd& x, std::span<const double> resolution,
                         const std::vector<bool>& departure_counts) {
  require_finite_matrix(x, "reveal ensemble fit", 3);
  if (!resolution.empty() && resolution.size() != static_cast<size_t>(x.cols()))
    throw DetectorInputError("reveal ensemble fit: " + std::to_string(resolution.size()) + " resolutions for " +
                             std::to_string(x.cols()) + " columns");
  input_cols_ = x.cols();
  floored_ = !resolution.empty();
  // Dividing a column by its resolution makes the floor's absolute part one resolution; none of the three
  // detectors depends on a column's units otherwise. Unknown resolution: a floor of 1e-9 in the column's units.
  unit_ = Eigen::RowVectorXd::Ones(x.cols());
  for (size_t j = 0; j < resolution.size(); ++j)
    unit_(static_cast<Eigen::Index>(j)) = resolution[j] > 0 ? resolution[j] : 1e-9;
  if (floored_) {
    z_ = ZScore(ZScoreOptions{.floor = opt_.floor});
    pca_ = PcaMahalanobis(PcaMahalanobisOptions{opt_.pca_variance, true, opt_.floor, 1e-12});
  }
  used_.clear();
  constant_.clear();
  for (Eigen::Index j = 0; j < x.cols(); ++j) {
    const double lo = x.col(j).minCoeff(), hi = x.col(j).maxCoeff();
    if (hi - lo > 1e-12 * std::max(1.0, std::max(std::abs(lo), std::abs(hi)))) used_.push_back(j);
    else if (departure_counts.empty() || departure_counts.at(static_cast<size_t>(j))) constant_.emplace_back(j, lo);
  }
  fitted_ = true;
  if (used_.empty()) return;  // nothing varies: nothing can be anomalous
  const Eigen::MatrixXd xs = select(x);
  z_.fit(xs);
  pca_.fit(xs);
  iforest_.fit(xs);
  z_thr_ = threshold_at_quantile(z_score(xs), opt_.zscore_quantile);
  maha_thr_ = threshold_at_quantile(pca_.score(xs), opt_.mahalanobis_quantile);
  if_thr_ = threshold_at_quantile(iforest_.score(xs), 1.0 - opt_.iforest_contamination);
}

RevealEnsembleResult RevealEnsemble::evaluate(const Eigen::MatrixXd& x) const {
  if (!fitted_) throw DetectorInputError("reveal ensemble: evaluate before fit");
  require_scoring_input(x, input_cols_, "reveal ensemble evaluate");
  RevealEnsembleResult r;
  const Eigen::Index n = x.rows();
  r.flags.assign(static_cast<size_t>(n), 0);
  r.score = Eigen::VectorXd::Zero(n);
  if (used_.empty()) {
    r.z = r.maha = r.iforest = Eigen::VectorXd::Zero(n);
  } else {
    const Eigen::MatrixXd xs = select(x);
    r.z = z_score(xs);
    r.maha = pca_.score(xs);
    r.iforest = iforest_.score(xs);
  }
  // A column that never moved in training and moves now (beyond constant_min_z floors, with floors): beyond any
  // z threshold.
  auto departed = [&](double v, double c, Eigen::Index j) {
    if (!floored_) return std::abs(v - c) > 1e-9 * std::max(1.0, std::abs(c));
    const double u = unit_(j);
    return std::abs(v - c) / u > opt_.constant_min_z * opt_.floor.of(c / u);
  };
  for (Eigen::Index i = 0; i < n; ++i)
    for (const auto& [j, c] : constant_)
      if (departed(x(i, j), c, j)) {
        r.z(i) = std::max(r.z(i), 2 * std::max(z_thr_, 1.0));
        break;
      }
  r.z_threshold = z_thr_;
  r.maha_threshold = maha_thr_;
  r.iforest_threshold = if_thr_;
  auto reach = [](double s, double thr) { return thr > 0 ? std::clamp(s / thr, 0.0, 0.999) : 0.0; };
  for (Eigen::Index i = 0; i < n; ++i) {
    uint8_t f = 0;
    if (r.z(i) > z_thr_) f |= kRevealZ;
    if (r.maha(i) > maha_thr_) f |= kRevealMaha;
    if (r.iforest(i) > if_thr_) f |= kRevealIf;
    r.flags[static_cast<size_t>(i)] = f;
    const int agree = (f & kRevealZ ? 1 : 0) + (f & kRevealMaha ? 1 : 0) + (f & kRevealIf ? 1 : 0);
    const double frac = (reach(r.z(i), z_thr_) + reach(r.maha(i), maha_thr_) + reach(r.iforest(i), if_thr_)) / 3.0;
    r.score(i) = agree + std::min(frac, 0.999);
  }
  return r;
}

}  // namespace stackscope::analyze
