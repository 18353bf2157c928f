#include "analyze/gmm/layer_gmm.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "analyze/detectors/gmm_detector.h"
#include "analyze/detectors/thresholds.h"

namespace stackscope::analyze {

namespace {

constexpr Eigen::Index kMinRows = 32;      // fewer items than this: no distribution to learn
constexpr double kTail = 1e-4;             // chance of a normal item lying beyond the flagging radius
// Smallest change a finding may report on a log10 feature: 0.1 = a factor of 1.26.
constexpr double kMinLog10Change = 0.1;
constexpr size_t kFindingsPerGroup = 50;   // the worst ones; the count of all is reported
constexpr int kMaxComponents = 4;
constexpr double kMinorWeight = 0.05;      // components lighter than this are not a normal mode

std::string subsystem_of(const std::string& layer) {
  if (layer == "cuda" || layer == "nvml") return "gpu";
  if (layer == "nccl") return "network";
  return "software";
}

}  // namespace

GroupReport analyze_layer_group(const FeatureGroup& g, const std::string& host, std::vector<Finding>& findings) {
  GroupReport rep;
  rep.layer = g.layer;
  rep.subject = g.subject;
  rep.rows = g.x.rows();
  if (g.x.rows() < kMinRows) {
    rep.skipped = fmt::format("{} items, fewer than {}", g.x.rows(), kMinRows);
    return rep;
  }
  // Constant columns carry nothing to model (and would make the covariance singular): drop them.
  std::vector<Eigen::Index> keep;
  const Eigen::RowVectorXd mean = g.x.colwise().mean();
  Eigen::RowVectorXd sd(g.x.cols());
  for (Eigen::Index c = 0; c < g.x.cols(); ++c) {
    sd(c) = std::sqrt((g.x.col(c).array() - mean(c)).square().sum() / static_cast<double>(g.x.rows() - 1));
    if (sd(c) > 1e-9 * std::max(1.0, std::abs(mean(c)))) keep.push_back(c);
  }
  if (keep.empty()) {
    rep.skipped = "every feature is constant";
    return rep;
  }
  for (auto c : keep) rep.features.push_back(g.columns[static_cast<size_t>(c)].name);
  // Standardised so that the covariance regularisation means the same for every feature, by a floored
  // deviation (the variance floor): a log10 feature by at least a quarter of the smallest change worth
  // reporting (so the flagging radius, about 4 deviations, is about that change), any other by at least 1 % of
  // its level. A rate that is 5/s in every second then does not put 4/s thousands of deviations away.
  Eigen::RowVectorXd scale = sd;
  Eigen::VectorXd min_variance(static_cast<Eigen::Index>(keep.size()));
  for (size_t k = 0; k < keep.size(); ++k) {
    const Eigen::Index c = keep[k];
    const double floor = g.columns[static_cast<size_t>(c)].log10 ? kMinLog10Change / 4 : 0.01 * std::abs(mean(c));
    scale(c) = std::max(sd(c), floor);
    min_variance(static_cast<Eigen::Index>(k)) = (floor / scale(c)) * (floor / scale(c));
  }
  const Eigen::MatrixXd z = (g.x(Eigen::all, keep).rowwise() - mean(keep)).array().rowwise() / scale(keep).array();
  GmmDetector det({.components = 0,
                            .max_components = kMaxComponents,
                            .covariance = CovarianceType::full,
                            .restarts = 2,
                            .seed = 0,
                            .min_variance = min_variance});
  det.fit(z);
  // A low-weight, broad component can "explain" the outliers themselves (they would then sit close to their
  // most likely component). Refit on the rows whose most probable component is a major one, and judge every
  // row against that model of the normal modes.
  const Eigen::VectorXd& w = det.model().weights();
  if (det.chosen_components() > 1 && (w.array() < kMinorWeight).any()) {
    const Eigen::MatrixXd resp = det.model().responsibilities(z);
    std::vector<Eigen::Index> major_rows;
    for (Eigen::Index i = 0; i < z.rows(); ++i) {
      Eigen::Index k;
      resp.row(i).maxCoeff(&k);
      if (w(k) >= kMinorWeight) major_rows.push_back(i);
    }
    const int majors = static_cast<int>((w.array() >= kMinorWeight).count());
    if (static_cast<Eigen::Index>(major_rows.size()) >= kMinRows && majors >= 1) {
      GmmDetector refit({.components = 0, .max_components = majors, .covariance = CovarianceType::full,
                                  .restarts = 2, .seed = 1, .min_variance = min_variance});
      refit.fit(z(major_rows, Eigen::all));
      det = std::move(refit);
    }
  }
  rep.components = det.chosen_components();
  const int d = static_cast<int>(keep.size());
  rep.radius = std::sqrt(chi_square_upper_quantile(kTail, d));
  const Eigen::VectorXd m2 = det.squared_mahalanobis(z);
  std::vector<Eigen::Index> flagged;
  for (Eigen::Index i = 0; i < z.rows(); ++i)
    if (m2(i) > rep.radius * rep.radius) flagged.push_back(i);
  // Beyond the statistical verdict, a finding must be a material change on a log scale: features that are
  // nearly constant during a run (5 calls/s every second) otherwise put 5 -> 4 thousands of sd away.
  if (!flagged.empty()) {
    const Eigen::VectorXi fcomp = det.most_likely_component(z(flagged, Eigen::all));
    std::vector<Eigen::Index> material;
    for (size_t f = 0; f < flagged.size(); ++f) {
      bool big = false;
      for (Eigen::Index k = 0; k < d && !big; ++k) {
        const Eigen::Index col = keep[static_cast<size_t>(k)];
        if (!g.columns[static_cast<size_t>(col)].log10) {
          big = true;  // no natural effect size: keep the statistical verdict
          break;
        }
        const double expected = det.model().means()(fcomp(static_cast<Eigen::Index>(f)), k) * scale(col) + mean(col);
        big = std::abs(g.x(flagged[f], col) - expected) >= kMinLog10Change;
      }
      if (big) material.push_back(flagged[f]);
    }
    flagged.swap(material);
  }
  rep.anomalies = flagged.size();
  std::sort(flagged.begin(), flagged.end(), [&](auto a, auto b) { return m2(a) > m2(b); });
  if (flagged.size() > kFindingsPerGroup) flagged.resize(kFindingsPerGroup);
  if (flagged.empty()) return rep;
  const Eigen::MatrixXd zf = z(flagged, Eigen::all);
  const Eigen::MatrixXd dev = det.feature_deviations(zf);
  const Eigen::VectorXi comp = det.most_likely_component(zf);
  const Eigen::VectorXd gmm_score = det.score(zf);
  for (size_t f = 0; f < flagged.size(); ++f) {
    const Eigen::Index row = flagged[f];
    const auto fi = static_cast<Eigen::Index>(f);
    Finding out;
    out.detector = "gmm";
    out.layer = g.layer;
    out.subsystem = subsystem_of(g.layer);
    out.host = host;
    out.subject = g.subject;
    out.t_start_ns = g.t_ns[static_cast<size_t>(row)];
    out.t_end_ns = out.t_start_ns + g.duration_ns[static_cast<size_t>(row)];
    out.score = std::sqrt(m2(row));
    // The reason shown is the most deviating feature among those that changed materially (see kMinLog10Change).
    Eigen::Index worst = -1;
    for (Eigen::Index k = 0; k < d; ++k) {
      const Eigen::Index col = keep[static_cast<size_t>(k)];
      const auto& fc = g.columns[static_cast<size_t>(col)];
      const double expected = det.model().means()(comp(fi), k) * scale(col) + mean(col);
      const bool material = !fc.log10 || std::abs(g.x(row, col) - expected) >= kMinLog10Change;
      if (material && (worst < 0 || std::abs(dev(fi, k)) > std::abs(dev(fi, worst)))) worst = k;
    }
    if (worst < 0) dev.row(fi).cwiseAbs().maxCoeff(&worst);
    for (Eigen::Index k = 0; k < d; ++k) {
      const Eigen::Index col = keep[static_cast<size_t>(k)];
      const auto& fc = g.columns[static_cast<size_t>(col)];
      const double expected_raw = det.model().means()(comp(fi), k) * scale(col) + mean(col);
      Evidence e{g.subject, fc.display, fc.to_display(g.x(row, col)), fc.to_display(expected_raw), dev(fi, k)};
      if (k == worst) out.evidence.insert(out.evidence.begin(), e);  // the deviating feature first
      else out.evidence.push_back(e);
    }
    const Evidence& why = out.evidence.front();
    out.summary = fmt::format("{} {}: {} {:.4g}, typical {:.4g} ({:+.1f} sd); {:.1f} sd from its cluster, -log p = {:.1f}",
                              g.layer, g.subject, why.feature, why.value, why.expected, why.score, out.score,
                              gmm_score(fi));
    findings.push_back(std::move(out));
  }
  return rep;
}

}  // namespace stackscope::analyze
