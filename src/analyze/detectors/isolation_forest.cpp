#include "analyze/detectors/isolation_forest.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "analyze/detectors/input_checks.h"

namespace stackscope::analyze {

namespace {
// splitmix64: a small, fast, well-mixed generator; one state per tree keeps fits reproducible.
uint64_t next_u64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
double next_unit(uint64_t& s) { return static_cast<double>(next_u64(s) >> 11) * 0x1.0p-53; }
size_t next_index(uint64_t& s, size_t n) { return static_cast<size_t>(next_unit(s) * static_cast<double>(n)); }
}  // namespace

IsolationForest::IsolationForest(IsolationForestOptions options) : opt_(options) {
  if (opt_.trees < 1) throw DetectorInputError("isolation forest: trees must be >= 1");
  if (opt_.max_samples < 2) throw DetectorInputError("isolation forest: max_samples must be >= 2");
}

double IsolationForest::average_path_length(double n) {
  if (n <= 1) return 0.0;
  if (n <= 2) return 1.0;
  constexpr double kEulerGamma = 0.5772156649015329;
  return 2.0 * (std::log(n - 1.0) + kEulerGamma) - 2.0 * (n - 1.0) / n;
}

int32_t IsolationForest::build(const Eigen::MatrixXd& x, std::vector<Eigen::Index>& idx, size_t lo, size_t hi,
                               int depth, int max_depth, uint64_t& rng) {
  const int32_t self = static_cast<int32_t>(nodes_.size());
  const size_t n = hi - lo;
  auto make_leaf = [&] {
    nodes_.push_back({depth + average_path_length(static_cast<double>(n)), -1, -1});
    return self;
  };
  if (n <= 1 || depth >= max_depth) return make_leaf();
  // Pick a random feature that is not constant on this node (like scikit-learn's extra trees), or one constant
  // in training that the floor makes splittable.
  const Eigen::Index d = x.cols();
  Eigen::Index feature = -1;
  double mn = 0, mx = 0;
  std::vector<Eigen::Index> order(static_cast<size_t>(d));
  std::iota(order.begin(), order.end(), 0);
  for (Eigen::Index tried = 0; tried < d; ++tried) {
    const size_t pick = static_cast<size_t>(tried) + next_index(rng, static_cast<size_t>(d - tried));
    std::swap(order[static_cast<size_t>(tried)], order[pick]);
    const Eigen::Index f = order[static_cast<size_t>(tried)];
    mn = mx = x(idx[lo], f);
    for (size_t i = lo + 1; i < hi; ++i) {
      const double v = x(idx[i], f);
      mn = std::min(mn, v);
      mx = std::max(mx, v);
    }
    if (mx > mn) {
      feature = f;
      break;
    }
    if (const double w = constant_width_[static_cast<size_t>(f)]; w > 0) {
      mn -= w;
      mx += w;
      feature = f;
      break;
    }
  }
  if (feature < 0) return make_leaf();  // all remaining points are identical
  double split = mn + next_unit(rng) * (mx - mn);
  if (split >= mx) split = mn;  // keep both sides non-empty
  auto mid = std::partition(idx.begin() + static_cast<std::ptrdiff_t>(lo), idx.begin() + static_cast<std::ptrdiff_t>(hi),
                            [&](Eigen::Index r) { return x(r, feature) <= split; });
  const size_t m = static_cast<size_t>(mid - idx.begin());
  nodes_.push_back({split, static_cast<int32_t>(feature), -1});
  build(x, idx, lo, m, depth + 1, max_depth, rng);
  const int32_t right = build(x, idx, m, hi, depth + 1, max_depth, rng);
  nodes_[static_cast<size_t>(self)].right = right;
  return self;
}

void IsolationForest::fit(const Eigen::MatrixXd& x) {
  require_finite_matrix(x, "isolation forest fit", 2);
  dims_ = x.cols();
  constant_width_.assign(static_cast<size_t>(x.cols()), 0.0);
  if (opt_.floor.active())
    for (Eigen::Index c : constant_columns(x)) constant_width_[static_cast<size_t>(c)] = opt_.floor.of(x(0, c));
  nodes_.clear();
  roots_.clear();
  const size_t n = static_cast<size_t>(x.rows());
  samples_per_tree_ = static_cast<int>(std::min<size_t>(n, static_cast<size_t>(opt_.max_samples)));
  const int max_depth = static_cast<int>(std::ceil(std::log2(std::max(2, samples_per_tree_))));
  std::vector<Eigen::Index> all(n);
  std::iota(all.begin(), all.end(), 0);
  std::vector<Eigen::Index> idx(static_cast<size_t>(samples_per_tree_));
  for (int t = 0; t < opt_.trees; ++t) {
    uint64_t rng = opt_.seed * 0x100000001B3ull + static_cast<uint64_t>(t) + 1;
    // Partial Fisher-Yates: a sample without replacement.
    for (size_t i = 0; i < idx.size(); ++i) {
      std::swap(all[i], all[i + next_index(rng, n - i)]);
      idx[i] = all[i];
    }
    roots_.push_back(build(x, idx, 0, idx.size(), 0, max_depth, rng));
  }
  depth_ = max_depth;
  complete_feature_.clear();
  complete_split_.clear();
  complete_leaf_.clear();
  if (opt_.complete_layout && depth_ <= kMaxCompleteDepth) {
    const size_t internal = (size_t{1} << depth_) - 1, leaves = size_t{1} << depth_;
    complete_feature_.assign(internal * roots_.size(), 0);
    complete_split_.assign(internal * roots_.size(), 0.0);
    complete_leaf_.assign(leaves * roots_.size(), 0.0);
    for (size_t t = 0; t < roots_.size(); ++t) layout_complete(roots_[t], t, 0, 0);
  }
}

void IsolationForest::layout_complete(int32_t node, size_t tree, size_t slot, int depth) {
  const size_t internal = (size_t{1} << depth_) - 1;
  const Node& n = nodes_[static_cast<size_t>(node)];
  if (depth == depth_) {  // the build stops at the depth limit, so this is a leaf
    complete_leaf_[tree * (internal + 1) + (slot - internal)] = n.value;
    return;
  }
  const size_t at = tree * internal + slot;
  if (n.feature < 0) {
    // Pass-through: x > +inf never holds, so every point goes left, down to the same leaf value.
    complete_feature_[at] = 0;
    complete_split_[at] = std::numeric_limits<double>::infinity();
    layout_complete(node, tree, 2 * slot + 1, depth + 1);
    layout_complete(node, tree, 2 * slot + 2, depth + 1);  // unreachable, filled for determinism
    return;
  }
  complete_feature_[at] = n.feature;
  complete_split_[at] = n.value;
  layout_complete(node + 1, tree, 2 * slot + 1, depth + 1);
  layout_complete(n.right, tree, 2 * slot + 2, depth + 1);
}

Eigen::VectorXd IsolationForest::mean_path_length(const Eigen::MatrixXd& x) const {
  require_scoring_input(x, dims_, "isolation forest score");
  // Row-major copy: a point's features are contiguous during traversal.
  const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> xr = x;
  const Eigen::Index n = x.rows();
  Eigen::VectorXd depth = Eigen::VectorXd::Zero(n);
  const Node* nodes = nodes_.data();
  constexpr Eigen::Index kBlock = 512;  // one tree stays hot in L1 while a block of points walks it
  if (!complete_leaf_.empty()) {
    constexpr Eigen::Index kLanes = 8;  // independent walks interleaved: their loads overlap
    const size_t internal = (size_t{1} << depth_) - 1;
    for (Eigen::Index b = 0; b < n; b += kBlock) {
      const Eigen::Index e = std::min(n, b + kBlock);
      for (size_t t = 0; t < roots_.size(); ++t) {
        const int32_t* feat = complete_feature_.data() + t * internal;
        const double* split = complete_split_.data() + t * internal;
        const double* leaf = complete_leaf_.data() + t * (internal + 1);
        Eigen::Index i = b;
        for (; i + kLanes <= e; i += kLanes) {
          size_t k[kLanes] = {};
          const double* p = xr.data() + i * dims_;
          for (int level = 0; level < depth_; ++level)
            for (Eigen::Index l = 0; l < kLanes; ++l)
              k[l] = 2 * k[l] + 1 + static_cast<size_t>(p[l * dims_ + feat[k[l]]] > split[k[l]]);
          for (Eigen::Index l = 0; l < kLanes; ++l) depth(i + l) += leaf[k[l] - internal];
        }
        for (; i < e; ++i) {
          size_t k = 0;
          const double* p = xr.data() + i * dims_;
          for (int level = 0; level < depth_; ++level) k = 2 * k + 1 + static_cast<size_t>(p[feat[k]] > split[k]);
          depth(i) += leaf[k - internal];
        }
      }
    }
    return depth / static_cast<double>(roots_.size());
  }
  for (Eigen::Index b = 0; b < n; b += kBlock) {
    const Eigen::Index e = std::min(n, b + kBlock);
    for (int32_t root : roots_) {
      for (Eigen::Index i = b; i < e; ++i) {
        const double* p = xr.data() + i * dims_;
        int32_t k = root;
        while (nodes[k].feature >= 0) k = p[nodes[k].feature] <= nodes[k].value ? k + 1 : nodes[k].right;
        depth(i) += nodes[k].value;
      }
    }
  }
  return depth / static_cast<double>(roots_.size());
}

Eigen::VectorXd IsolationForest::score(const Eigen::MatrixXd& x) const {
  const double c = average_path_length(samples_per_tree_);
  return mean_path_length(x).unaryExpr([c](double h) { return std::exp2(-h / c); });
}

}  // namespace stackscope::analyze
