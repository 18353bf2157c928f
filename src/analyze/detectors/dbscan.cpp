#include "analyze/detectors/dbscan.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nanoflann.hpp>

#include "analyze/detectors/input_checks.h"
#include "analyze/detectors/thresholds.h"

namespace stackscope::analyze {

namespace {

// Brute force works on tiles of query rows x points small enough to stay in cache (a 256 x 2048 tile is 4 MiB);
// the whole query block against every point at once wrote gigabytes of distances and ran several times slower.
constexpr Eigen::Index kRowBlock = 256;
constexpr Eigen::Index kPointBlock = 2048;
// A kd-tree distance evaluation costs about six brute-force ones (a GEMM term): measured on the CPU VM with
// 19,000 points in 16 columns (34 ns against 6.3 ns per point).
constexpr double kTreeEvalCost = 6;
// Query rows the tree is tried on before choosing it or brute force for the rest.
constexpr Eigen::Index kProbeRows = 256;

using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Points as nanoflann reads them: one row after another.
struct PointCloud {
  RowMatrix points;
  size_t kdtree_get_point_count() const { return static_cast<size_t>(points.rows()); }
  double kdtree_get_pt(size_t i, size_t d) const {
    return points(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(d));
  }
  template <class BoundingBox>
  bool kdtree_get_bbox(BoundingBox&) const {
    return false;
  }
};

// Distance evaluations on this thread: how well the tree prunes for the probed queries.
thread_local uint64_t tl_tree_evals = 0;

// Squared Euclidean distance, counting its evaluations (nanoflann's Distance concept).
struct CountingL2 {
  using ElementType = double;
  using DistanceType = double;
  explicit CountingL2(const PointCloud& c) : cloud(c) {}
  double evalMetric(const double* a, uint32_t index, size_t size) const {
    ++tl_tree_evals;
    const double* b = cloud.points.row(index).data();
    double sum = 0;
    for (size_t i = 0; i < size; ++i) sum += (a[i] - b[i]) * (a[i] - b[i]);
    return sum;
  }
  template <typename U, typename V>
  double accum_dist(const U a, const V b, size_t) const {
    return (a - b) * (a - b);
  }
  const PointCloud& cloud;
};

using KdTree = nanoflann::KDTreeSingleIndexAdaptor<CountingL2, PointCloud, -1, uint32_t>;

// Every point within a squared radius, the boundary included (nanoflann's own set excludes it; DBSCAN counts it).
struct WithinRadius {
  double radius2;
  std::vector<std::pair<uint32_t, double>>& found;
  size_t size() const { return found.size(); }
  bool full() const { return true; }
  bool addPoint(double d2, uint32_t index) {
    if (d2 <= radius2) found.emplace_back(index, d2);
    return true;
  }
  double worstDist() const { return std::nextafter(radius2, std::numeric_limits<double>::infinity()); }
};

int find_root(std::vector<int>& parent, int i) {
  while (parent[static_cast<size_t>(i)] != i) {
    parent[static_cast<size_t>(i)] = parent[static_cast<size_t>(parent[static_cast<size_t>(i)])];
    i = parent[static_cast<size_t>(i)];
  }
  return i;
}

}  // namespace

// Nearest-neighbour searches over a fixed set of points (the training rows, then the core points). A kd-tree
// (nanoflann) answers exactly and fast where the data has few intrinsic dimensions (window features: a few latent
// factors, many near-identical rows); on high-dimensional noise it visits most points and costs more than brute
// force, so a search first measures the tree on a sample of its queries (plan()) and takes the cheaper way.
class DbscanDetector::PointIndex {
 public:
  PointIndex(const Eigen::MatrixXd& points, bool use_tree)
      : use_tree_(use_tree),
        cloud_{points},
        tree_(static_cast<size_t>(points.cols()), cloud_, nanoflann::KDTreeSingleIndexAdaptorParams(16)),
        points_(points),
        norms_(points.rowwise().squaredNorm()) {}

  Eigen::Index size() const { return points_.rows(); }

  struct Plan {
    bool tree = false;
    double terms_per_row = 0;  // brute-force distance terms (point x column) one query row costs this way
  };
  // The tree's cost on up to kProbeRows rows of `q` spread over it, for k nearest, against brute force.
  Plan plan(const Eigen::MatrixXd& q, int k) const {
    const double d = static_cast<double>(std::max<Eigen::Index>(q.cols(), 1));
    if (!use_tree_) return {false, static_cast<double>(size()) * d};
    const Eigen::Index probes = std::min(kProbeRows, q.rows());
    const uint64_t before = tl_tree_evals;
    for (Eigen::Index p = 0; p < probes; ++p) tree_kth(q, p * q.rows() / probes, k);
    const double evals = probes ? static_cast<double>(tl_tree_evals - before) / static_cast<double>(probes) : 0;
    const double tree = kTreeEvalCost * evals * d, brute = static_cast<double>(size()) * d;
    return {tree < brute, std::min(tree, brute)};
  }

  // Squared distance from each row of `q` to its k-th nearest point (k >= 1, at most size(); a row that is one
  // of the points is its own first neighbour).
  Eigen::VectorXd kth_nearest_sq(const Eigen::MatrixXd& q, int k, const Plan& how) const {
    Eigen::VectorXd out(q.rows());
    if (how.tree) {
      for (Eigen::Index i = 0; i < q.rows(); ++i) out(i) = tree_kth(q, i, k);
      return out;
    }
    // Brute force: the k smallest of each row kept in a max-heap while the point blocks go by.
    const size_t kk = static_cast<size_t>(k);
    std::vector<double> heaps;
    for_each_tile(q, [&](Eigen::Index b, Eigen::Index r, Eigen::Index p, const Eigen::MatrixXd& d2, bool first) {
      if (first) heaps.assign(static_cast<size_t>(r) * kk, std::numeric_limits<double>::infinity());
      for (Eigen::Index i = 0; i < r; ++i) {
        double* heap = heaps.data() + static_cast<size_t>(i) * kk;
        for (Eigen::Index j = 0; j < d2.cols(); ++j) {
          const double v = d2(i, j);
          if (v >= heap[0]) continue;
          std::pop_heap(heap, heap + kk);
          heap[kk - 1] = v;
          std::push_heap(heap, heap + kk);
        }
      }
      if (p + d2.cols() == size())  // the last block of points: the heaps are final
        for (Eigen::Index i = 0; i < r; ++i) out(b + i) = heaps[static_cast<size_t>(i) * kk];
    });
    return out;
  }

  // f(row, point, squared distance) for every point within sqrt(radius2) of each row of `q`, the boundary included.
  template <class F>
  void for_each_within(const Eigen::MatrixXd& q, double radius2, const Plan& how, F&& f) const {
    if (how.tree) {
      RowMatrix row(1, q.cols());
      std::vector<std::pair<uint32_t, double>> found;
      for (Eigen::Index i = 0; i < q.rows(); ++i) {
        row = q.row(i);
        found.clear();
        WithinRadius result{radius2, found};
        tree_.findNeighbors(result, row.data(), nanoflann::SearchParams(0, 0, false));
        for (const auto& hit : found) f(i, static_cast<Eigen::Index>(hit.first), hit.second);
      }
      return;
    }
    for_each_tile(q, [&](Eigen::Index b, Eigen::Index r, Eigen::Index p, const Eigen::MatrixXd& d2, bool) {
      for (Eigen::Index i = 0; i < r; ++i)
        for (Eigen::Index j = 0; j < d2.cols(); ++j)
          if (d2(i, j) <= radius2) f(b + i, p + j, d2(i, j));
    });
  }

 private:
  double tree_kth(const Eigen::MatrixXd& q, Eigen::Index i, int k) const {
    thread_local std::vector<uint32_t> idx;
    thread_local std::vector<double> d2;
    thread_local RowMatrix row;
    idx.resize(static_cast<size_t>(k));
    d2.resize(static_cast<size_t>(k));
    row = q.row(i);
    nanoflann::KNNResultSet<double, uint32_t> result(static_cast<uint32_t>(k));
    result.init(idx.data(), d2.data());
    tree_.findNeighbors(result, row.data(), nanoflann::SearchParams());
    return d2[static_cast<size_t>(k) - 1];
  }

  // Squared distances, tile by tile: f(first row, rows, first point, tile, first tile of these rows). A tile of
  // kRowBlock rows x kPointBlock points stays in cache (all points at once wrote gigabytes and ran several times
  // slower).
  template <class F>
  void for_each_tile(const Eigen::MatrixXd& q, F&& f) const {
    Eigen::MatrixXd d2;
    for (Eigen::Index b = 0; b < q.rows(); b += kRowBlock) {
      const Eigen::Index r = std::min(kRowBlock, q.rows() - b);
      const auto rows = q.middleRows(b, r);
      const Eigen::VectorXd row_norms = rows.rowwise().squaredNorm();
      for (Eigen::Index p = 0; p < size(); p += kPointBlock) {
        const Eigen::Index m = std::min(kPointBlock, size() - p);
        d2.noalias() = -2.0 * (rows * points_.middleRows(p, m).transpose());
        d2.colwise() += row_norms;
        d2.rowwise() += norms_.segment(p, m).transpose();
        d2 = d2.cwiseMax(0.0);
        f(b, r, p, d2, p == 0);
      }
    }
  }

  bool use_tree_;
  PointCloud cloud_;
  KdTree tree_;
  Eigen::MatrixXd points_;
  Eigen::VectorXd norms_;
};

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
  const PointIndex index(x, opt_.spatial_index);
  // A point is a core point when its min_points-th nearest neighbour (itself the first) lies within eps.
  const int k = static_cast<int>(std::min<Eigen::Index>(opt_.min_points, n));
  const PointIndex::Plan how = index.plan(x, k);
  const Eigen::VectorXd kdist2 = index.kth_nearest_sq(x, k, how);
  eps_ = opt_.eps;
  if (eps_ == 0) {
    std::vector<double> kdist(static_cast<size_t>(n));
    for (Eigen::Index i = 0; i < n; ++i) kdist[static_cast<size_t>(i)] = std::sqrt(kdist2(i));
    eps_ = threshold_at_quantile(kdist, opt_.eps_quantile);
    if (!(eps_ > 0)) eps_ = 1e-12;  // all neighbours coincide: any departure is noise
  }
  const double eps2 = eps_ * eps_;
  std::vector<char> core(static_cast<size_t>(n), 0);
  if (opt_.min_points <= n)
    for (Eigen::Index i = 0; i < n; ++i) core[static_cast<size_t>(i)] = kdist2(i) <= eps2;
  // Core points within eps of each other share a cluster; a border point joins its nearest core neighbour's.
  std::vector<int> parent(static_cast<size_t>(n));
  std::iota(parent.begin(), parent.end(), 0);
  std::vector<int> border_of(static_cast<size_t>(n), -1);
  std::vector<double> border_d2(static_cast<size_t>(n), std::numeric_limits<double>::infinity());
  index.for_each_within(x, eps2, how, [&](Eigen::Index i, Eigen::Index j, double d2) {
    const size_t p = static_cast<size_t>(i), q = static_cast<size_t>(j);
    if (!core[q] || p == q) return;
    if (core[p]) {
      parent[static_cast<size_t>(find_root(parent, static_cast<int>(p)))] = find_root(parent, static_cast<int>(q));
    } else if (d2 < border_d2[p] || (d2 == border_d2[p] && static_cast<int>(q) < border_of[p])) {
      border_d2[p] = d2;
      border_of[p] = static_cast<int>(q);
    }
  });
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
  core_index_ = std::make_shared<const PointIndex>(cores_, opt_.spatial_index);
}

DbscanDetector::ScorePlan DbscanDetector::plan_score(const Eigen::MatrixXd& input) const {
  require_scoring_input(input, cores_.rows() ? mean_.size() : 0, "dbscan score");
  const PointIndex::Plan how = core_index_->plan(transform(input), 1);
  return {how.tree, how.terms_per_row * static_cast<double>(input.rows())};
}

Eigen::VectorXd DbscanDetector::score(const Eigen::MatrixXd& input) const {
  require_scoring_input(input, cores_.rows() ? mean_.size() : 0, "dbscan score");
  const Eigen::MatrixXd x = transform(input);
  const PointIndex::Plan how = core_index_->plan(x, 1);
  // Bounded time whatever the data: past the limit the job is refused with its numbers rather than run for hours.
  const double terms = how.terms_per_row * static_cast<double>(x.rows());
  if (terms > opt_.max_score_terms)
    throw DetectorInputError(fmt::format(
        "dbscan score: {} rows against {} core points in {} columns would cost about {:.3g} distance terms ({}), "
        "more than the limit of {:.3g}; score fewer rows, or fit on fewer rows (fewer core points)",
        x.rows(), cores_.rows(), x.cols(), terms,
        how.tree ? "with the spatial index" : "the spatial index prunes little on this data", opt_.max_score_terms));
  return core_index_->kth_nearest_sq(x, 1, how).array().sqrt() / eps_;
}

}  // namespace stackscope::analyze
