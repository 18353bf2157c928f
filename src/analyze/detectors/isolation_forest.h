// Isolation Forest (Liu, Ting, Zhou 2008): random axis-aligned splits isolate rare points in few steps.
// Score = 2^(-E[path length] / c(max_samples)), in (0, 1], higher is more anomalous (scikit-learn's
// score_samples negated). Trees are stored flattened (pre-order, left child next) so scoring is a tight loop.
#pragma once
#include <Eigen/Dense>
#include <cstdint>
#include <string>
#include <vector>

#include "analyze/detectors/detector.h"
#include "analyze/detectors/feature_scaling.h"

namespace stackscope::analyze {

struct IsolationForestOptions {
  int trees = 100;
  int max_samples = 256;  // sub-sample per tree (min with the number of rows)
  uint64_t seed = 0;
  // Score through the branch-free complete-tree layout where the depth limit allows (the fast path); false keeps
  // the plain pointer walk (the reference the fast path is tested against).
  bool complete_layout = true;
  // With a floor, a column constant in training can still be split, uniformly within floor.of(value) of its
  // value: a row that moves it far is then isolated by any such split. Without, it is never split (and moving
  // it goes unnoticed).
  ScaleFloor floor{};
};

class IsolationForest final : public AnomalyDetector {
 public:
  explicit IsolationForest(IsolationForestOptions options = {});
  std::string name() const override { return "iforest"; }
  // Needs at least 2 rows.
  void fit(const Eigen::MatrixXd& x) override;
  Eigen::VectorXd score(const Eigen::MatrixXd& x) const override;

  // Mean path length over the trees (leaf depth plus c(leaf size)), one per row.
  Eigen::VectorXd mean_path_length(const Eigen::MatrixXd& x) const;
  int trees() const { return static_cast<int>(roots_.size()); }
  int samples_per_tree() const { return samples_per_tree_; }
  size_t nodes() const { return nodes_.size(); }
  const IsolationForestOptions& options() const { return opt_; }

  // Expected path length of an unsuccessful BST search among n points: the normaliser c(n).
  static double average_path_length(double n);

 private:
  struct Node {
    double value;     // split threshold (x <= value goes left); at a leaf: depth + c(size)
    int32_t feature;  // -1 at a leaf
    int32_t right;    // index of the right child; the left child is the next node
  };
  int32_t build(const Eigen::MatrixXd& x, std::vector<Eigen::Index>& idx, size_t lo, size_t hi, int depth,
                int max_depth, uint64_t& rng_state);
  // Complete-tree layout (depth limit <= kMaxCompleteDepth): every tree padded to a full binary tree of the
  // depth limit, a leaf above that depth passed through by "always left" nodes, so that scoring walks a fixed
  // number of levels without data-dependent branches, several points at once.
  void layout_complete(int32_t node, size_t tree, size_t slot, int depth);
  static constexpr int kMaxCompleteDepth = 12;
  IsolationForestOptions opt_;
  std::vector<Node> nodes_;
  std::vector<double> constant_width_;  // per feature: floor half-width where constant in training, else 0
  std::vector<int32_t> roots_;
  int depth_ = 0;                     // depth limit of the trees
  std::vector<int32_t> complete_feature_;  // per tree 2^depth - 1 internal nodes, children of i at 2i+1, 2i+2
  std::vector<double> complete_split_;
  std::vector<double> complete_leaf_;      // per tree 2^depth leaf values
  Eigen::Index dims_ = 0;
  int samples_per_tree_ = 0;
};

}  // namespace stackscope::analyze
