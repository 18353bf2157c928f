#include "analyze/reveal/metric_pruning.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <set>
#include <stdexcept>

namespace stackscope::analyze {

int metric_priority(std::string_view name) {
  auto has = [&](std::string_view part) { return name.find(part) != std::string_view::npos; };
  // Ordered table: the first matching row gives the rank.
  struct Row {
    int rank;
    std::array<std::string_view, 6> parts;
  };
  static constexpr std::array<Row, 7> kTable = {{
      {0, {"util", "busy", "cpu.time.user", "cpu.time.system", "", ""}},
      {1, {"bytes", "throughput", "packets", "sectors", ".ios", "completed"}},
      {2, {"mem.used", "mem.available", "memory.used", "mem.free", "usage", "rss"}},
      {3, {"freq", "mhz", "power", "watts", "clock", ""}},
      {4, {"pressure", "stall", "queue", "time.iowait", "in_flight", "blocked"}},
      {5, {"interrupts", "context_switches", "irq", "forks", "", ""}},
      {6, {"err", "drop", "retrans", "fault", "ecc", ""}},
  }};
  for (const Row& row : kTable)
    for (std::string_view p : row.parts)
      if (!p.empty() && has(p)) return row.rank;
  return 7;
}

Eigen::MatrixXd pearson_correlation(const Eigen::MatrixXd& values) {
  const Eigen::Index n = values.rows(), m = values.cols();
  Eigen::MatrixXd r = Eigen::MatrixXd::Zero(m, m);
  if (n < 2) return r;
  Eigen::MatrixXd centred = values.rowwise() - values.colwise().mean();
  Eigen::VectorXd norm = centred.colwise().norm();
  for (Eigen::Index j = 0; j < m; ++j) {
    // Spread below floating noise relative to the level counts as none.
    const double level = values.col(j).cwiseAbs().maxCoeff();
    if (norm(j) <= 1e-12 * std::max(1.0, level) * std::sqrt(static_cast<double>(n))) norm(j) = 0;
    if (norm(j) > 0) centred.col(j) /= norm(j);
    else centred.col(j).setZero();
  }
  r = centred.transpose() * centred;
  for (Eigen::Index j = 0; j < m; ++j) r(j, j) = norm(j) > 0 ? 1.0 : 0.0;
  return r;
}

CorrelationAccumulator::CorrelationAccumulator(size_t columns)
    : cols_(columns),
      shift_(Eigen::RowVectorXd::Zero(static_cast<Eigen::Index>(columns))),
      sum_(Eigen::RowVectorXd::Zero(static_cast<Eigen::Index>(columns))),
      max_abs_(Eigen::RowVectorXd::Zero(static_cast<Eigen::Index>(columns))),
      cross_(Eigen::MatrixXd::Zero(static_cast<Eigen::Index>(columns), static_cast<Eigen::Index>(columns))),
      block_(256, static_cast<Eigen::Index>(columns)) {}

void CorrelationAccumulator::add(std::span<const double> row) {
  if (row.size() != cols_)
    throw std::invalid_argument("correlation: a row of " + std::to_string(row.size()) + " values for " +
                                std::to_string(cols_) + " columns");
  const Eigen::Map<const Eigen::RowVectorXd> x(row.data(), static_cast<Eigen::Index>(cols_));
  if (!x.allFinite()) throw std::invalid_argument("correlation: non-finite value");
  if (n_ == 0) shift_ = x;
  ++n_;
  max_abs_ = max_abs_.cwiseMax(x.cwiseAbs());
  block_.row(block_rows_++) = x - shift_;
  if (block_rows_ == block_.rows()) flush();
}

void CorrelationAccumulator::flush() {
  if (block_rows_ == 0) return;
  const auto b = block_.topRows(block_rows_);
  sum_ += b.colwise().sum();
  cross_.noalias() += b.transpose() * b;
  block_rows_ = 0;
}

Eigen::MatrixXd CorrelationAccumulator::correlation() {
  flush();
  const auto m = static_cast<Eigen::Index>(cols_);
  Eigen::MatrixXd r = Eigen::MatrixXd::Zero(m, m);
  if (n_ < 2) return r;
  const double n = static_cast<double>(n_);
  // Centred cross products: sum (x-s)(y-s) - sum(x-s) sum(y-s) / n.
  Eigen::MatrixXd cov = cross_ - sum_.transpose() * sum_ / n;
  Eigen::VectorXd norm(m);
  for (Eigen::Index j = 0; j < m; ++j) {
    norm(j) = std::sqrt(std::max(cov(j, j), 0.0));
    // Same "no spread" rule as pearson_correlation.
    if (norm(j) <= 1e-12 * std::max(1.0, max_abs_(j)) * std::sqrt(n)) norm(j) = 0;
  }
  for (Eigen::Index i = 0; i < m; ++i)
    for (Eigen::Index j = 0; j < m; ++j)
      r(i, j) = norm(i) > 0 && norm(j) > 0 ? std::clamp(cov(i, j) / (norm(i) * norm(j)), -1.0, 1.0) : 0.0;
  for (Eigen::Index j = 0; j < m; ++j) r(j, j) = norm(j) > 0 ? 1.0 : 0.0;
  return r;
}

PruningResult prune_metrics(const std::vector<PruningWorkload>& workloads, const PruningOptions& options) {
  if (!(options.threshold > 0 && options.threshold <= 1))
    throw std::invalid_argument("metric pruning: threshold must be in (0, 1]");
  PruningResult result;
  std::set<std::string> kept, seen, varied;
  for (const PruningWorkload& w : workloads) {
    const bool given = w.correlation.size() > 0;
    const Eigen::Index width = given ? w.correlation.cols() : w.values.cols();
    if (static_cast<size_t>(width) != w.metrics.size() || (given && w.correlation.rows() != width))
      throw std::invalid_argument("metric pruning: workload '" + w.name + "' has " + std::to_string(w.metrics.size()) +
                                  " names for " + std::to_string(width) + " columns");
    if (!given)
      for (Eigen::Index j = 0; j < w.values.cols(); ++j)
        if (!w.values.col(j).allFinite())
          throw std::invalid_argument("metric pruning: workload '" + w.name + "' metric '" +
                                      w.metrics[static_cast<size_t>(j)] + "' has a non-finite value");
    const Eigen::MatrixXd r = (given ? w.correlation : pearson_correlation(w.values)).cwiseAbs();
    const auto m = static_cast<size_t>(width);
    std::vector<double> corr_variance(m, 0.0);
    std::vector<size_t> order;
    for (size_t j = 0; j < m; ++j) {
      seen.insert(w.metrics[j]);
      if (r(static_cast<Eigen::Index>(j), static_cast<Eigen::Index>(j)) == 0) continue;  // constant here
      varied.insert(w.metrics[j]);
      order.push_back(j);
      if (m > 1) {
        Eigen::VectorXd row = r.row(static_cast<Eigen::Index>(j));
        const double mean = (row.sum() - 1.0) / static_cast<double>(m - 1);
        double var = 0;
        for (size_t k = 0; k < m; ++k)
          if (k != j) var += (row(static_cast<Eigen::Index>(k)) - mean) * (row(static_cast<Eigen::Index>(k)) - mean);
        corr_variance[j] = var / static_cast<double>(m - 1);
      }
    }
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      const int pa = metric_priority(w.metrics[a]), pb = metric_priority(w.metrics[b]);
      if (pa != pb) return pa < pb;
      if (corr_variance[a] != corr_variance[b]) return corr_variance[a] > corr_variance[b];
      return w.metrics[a] < w.metrics[b];
    });
    std::vector<uint8_t> assigned(m, 0);
    for (size_t j : order) {
      if (assigned[j]) continue;
      assigned[j] = 1;
      MetricGroup g;
      g.workload = w.name;
      g.representative = w.metrics[j];
      for (size_t k : order) {
        const double abs_r = r(static_cast<Eigen::Index>(j), static_cast<Eigen::Index>(k));
        if (!assigned[k] && abs_r >= options.threshold) {
          assigned[k] = 1;
          g.redundant.push_back(w.metrics[k]);
          g.abs_r.push_back(abs_r);
        }
      }
      kept.insert(g.representative);
      result.groups.push_back(std::move(g));
    }
  }
  result.kept.assign(kept.begin(), kept.end());
  for (const std::string& s : seen)
    if (!varied.count(s)) result.constant.push_back(s);
  return result;
}

}  // namespace stackscope::analyze
