#include "analyze/detectors/dbscan.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "analyze/detectors/input_checks.h"
#include "analyze/detectors/kmeans.h"
#include "analyze/detectors/thresholds.h"

namespace stackscope::analyze {

namespace {
constexpr Eigen::Index kBlock = 512;
// The most row x core point x column terms one score() call computes: about a minute on one core.
constexpr double kMaxScoreWork = 2e10;

int find_root(std::vector<int>& parent, int i) {
  while (parent[static_cast<size_t>(i)] != i) {
    parent[static_cast<size_t>(i)] = parent[static_cast<size_t>(parent[static_cast<size_t>(i)])];
    i = parent[static_cast<size_t>(i)];
  }
  return i;
}
}  // namespace

DbscanDetector::DbscanDetector(DbscanOptions options) : opt_(options) {
  if (opt_.min_points < 1) throw DetectorInputError("dbscan: min_points must be >= 1");
  if (!(opt_.eps >= 0)) throw DetectorInputError("dbscan: eps must be >= 0");
}

Eigen::MatrixXd DbscanDetector::transform(const Eigen::MatrixXd& x) const {
  return (x.rowwise() - mean_.transpose()).array().rowwise() / scale_.transpose().array();
}

void DbscanDetector::fit(const Eigen::MatrixXd& input) {
  require_finite_matrix(input, "dbscan fit", 2);
  const FeatureScaling s =
      opt_.standardize ? FeatureScaling::fit(input, opt_.floor) : FeatureScaling::identity(input.cols());
  mean_ = s.center();
  scale_ = s.scale();
  Eigen::MatrixXd x = transform(input);
  if (x.rows() > opt_.max_train_rows) {
    std::vector<Eigen::Index> idx(static_cast<size_t>(x.rows()));
    std::iota(idx.begin(), idx.end(), 0);
    std::mt19937_64 rng(opt_.seed);
    std::shuffle(idx.begin(), idx.end(), rng);
    idx.resize(static_cast<size_t>(opt_.max_train_rows));
    std::sort(idx.begin(), idx.end());
    x = x(idx, Eigen::all).eval();
  }
  const Eigen::Index n = x.rows();
  const Eigen::Index kth = std::min<Eigen::Index>(opt_.min_points, n) - 1;  // 0-based, the point itself is 0th
  eps_ = opt_.eps;
  if (eps_ == 0) {
    std::vector<double> kdist;
    kdist.reserve(static_cast<size_t>(n));
    std::vector<double> row(static_cast<size_t>(n));
    for (Eigen::Index b = 0; b < n; b += kBlock) {
      const Eigen::Index r = std::min(kBlock, n - b);
      const Eigen::MatrixXd d2 = squared_distances(x.middleRows(b, r), x);
      for (Eigen::Index i = 0; i < r; ++i) {
        Eigen::Map<Eigen::VectorXd>(row.data(), n) = d2.row(i).transpose();
        row[static_cast<size_t>(b + i)] = 0;  // rounding can leave the self-distance slightly positive
        std::nth_element(row.begin(), row.begin() + kth, row.end());
        kdist.push_back(std::sqrt(row[static_cast<size_t>(kth)]));
      }
    }
    eps_ = threshold_at_quantile(kdist, opt_.eps_quantile);
    if (!(eps_ > 0)) eps_ = 1e-12;  // all neighbours coincide: any departure is noise
  }
  const double eps2 = eps_ * eps_;
  // Pass 1: core points. Pass 2: union core points that are neighbours; border points join a neighbour's cluster.
  std::vector<char> core(static_cast<size_t>(n), 0);
  for (Eigen::Index b = 0; b < n; b += kBlock) {
    const Eigen::Index r = std::min(kBlock, n - b);
    const Eigen::MatrixXd d2 = squared_distances(x.middleRows(b, r), x);
    for (Eigen::Index i = 0; i < r; ++i) core[static_cast<size_t>(b + i)] = (d2.row(i).array() <= eps2).count() >= opt_.min_points;
  }
  std::vector<int> parent(static_cast<size_t>(n));
  std::iota(parent.begin(), parent.end(), 0);
  std::vector<int> border_of(static_cast<size_t>(n), -1);
  for (Eigen::Index b = 0; b < n; b += kBlock) {
    const Eigen::Index r = std::min(kBlock, n - b);
    const Eigen::MatrixXd d2 = squared_distances(x.middleRows(b, r), x);
    for (Eigen::Index i = 0; i < r; ++i) {
      const int p = static_cast<int>(b + i);
      for (Eigen::Index j = 0; j < n; ++j) {
        if (d2(i, j) > eps2 || !core[static_cast<size_t>(j)]) continue;
        if (core[static_cast<size_t>(p)]) parent[static_cast<size_t>(find_root(parent, p))] = find_root(parent, static_cast<int>(j));
        else if (border_of[static_cast<size_t>(p)] < 0) border_of[static_cast<size_t>(p)] = static_cast<int>(j);
      }
    }
  }
  labels_ = Eigen::VectorXi::Constant(n, -1);
  std::vector<int> cluster_of_root(static_cast<size_t>(n), -1);
  clusters_ = 0;
  std::vector<Eigen::Index> core_rows;
  for (Eigen::Index i = 0; i < n; ++i) {
    if (!core[static_cast<size_t>(i)]) continue;
    core_rows.push_back(i);
    int& c = cluster_of_root[static_cast<size_t>(find_root(parent, static_cast<int>(i)))];
    if (c < 0) c = clusters_++;
    labels_(i) = c;
  }
  for (Eigen::Index i = 0; i < n; ++i)
    if (!core[static_cast<size_t>(i)] && border_of[static_cast<size_t>(i)] >= 0)
      labels_(i) = labels_(border_of[static_cast<size_t>(i)]);
  if (core_rows.empty())
    throw DetectorInputError("dbscan fit: no core point (no row has " + std::to_string(opt_.min_points) +
                             " neighbours within eps " + std::to_string(eps_) + "); raise eps or lower min_points");
  cores_ = x(core_rows, Eigen::all);
}

Eigen::VectorXd DbscanDetector::score(const Eigen::MatrixXd& input) const {
  require_scoring_input(input, cores_.rows() ? mean_.size() : 0, "dbscan score");
  // Every row is compared with every core point (no spatial index): 1 M rows against 20 k core points ran for
  // more than 5 minutes. Past the limit, refuse with the numbers rather than run for hours.
  const double pairs = static_cast<double>(input.rows()) * static_cast<double>(cores_.rows()) *
                       static_cast<double>(std::max<Eigen::Index>(input.cols(), 1));
  if (pairs > kMaxScoreWork)
    throw DetectorInputError(fmt::format(
        "dbscan score: {} rows x {} core points x {} columns is {:.3g} distance terms, more than the limit of {:.3g}; "
        "score fewer rows, or fit on fewer rows (fewer core points)",
        input.rows(), cores_.rows(), input.cols(), pairs, kMaxScoreWork));
  const Eigen::MatrixXd x = transform(input);
  Eigen::VectorXd s(x.rows());
  for (Eigen::Index b = 0; b < x.rows(); b += kBlock) {
    const Eigen::Index r = std::min(kBlock, x.rows() - b);
    s.segment(b, r) = squared_distances(x.middleRows(b, r), cores_).rowwise().minCoeff().array().sqrt() / eps_;
  }
  return s;
}

}  // namespace stackscope::analyze
