// `stackscope analyze --detector gmm`: eACGM's per-layer analysis. For each recording and layer, per-event
// feature rows (layer_features.h), one GMM per layer and event-name group (or per GPU for NVML), and the items
// lying beyond the radius of their most likely component reported as findings with the feature that deviates.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "analyze/detectors/gmm_detector.h"
#include "analyze/features/layer_features.h"
#include "analyze/detectors/thresholds.h"
#include "cli/analyze.h"
#include "store/recording_reader.h"

namespace stackscope::cli {
namespace {

using analyze::FeatureGroup;

constexpr Eigen::Index kMinRows = 32;      // fewer items than this: no distribution to learn
constexpr double kTail = 1e-4;             // chance of a normal item lying beyond the flagging radius
// Smallest change a finding may report on a log10 feature: 0.1 = a factor of 1.26.
constexpr double kMinLog10Change = 0.1;
constexpr size_t kFindingsPerGroup = 50;   // the worst ones; the count of all is reported
constexpr int kMaxComponents = 4;
constexpr double kMinorWeight = 0.05;      // components lighter than this are not a normal mode

const std::set<Layer> kGmmLayers{Layer::cuda, Layer::nccl, Layer::torch, Layer::python, Layer::nvml};

std::string subsystem_of(const std::string& layer) {
  if (layer == "cuda" || layer == "nvml") return "gpu";
  if (layer == "nccl") return "network";
  return "software";
}

struct GroupReport {
  std::string layer, subject;
  Eigen::Index rows = 0;
  int components = 0;
  size_t anomalies = 0;
  std::vector<std::string> features;
  std::string skipped;  // why no model was fitted
  double radius = 0;
};

GroupReport analyze_group(const FeatureGroup& g, const std::string& host, std::vector<Finding>& findings) {
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
  analyze::GmmDetector det({.components = 0,
                            .max_components = kMaxComponents,
                            .covariance = analyze::CovarianceType::full,
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
      analyze::GmmDetector refit({.components = 0, .max_components = majors, .covariance = analyze::CovarianceType::full,
                                  .restarts = 2, .seed = 1, .min_variance = min_variance});
      refit.fit(z(major_rows, Eigen::all));
      det = std::move(refit);
    }
  }
  rep.components = det.chosen_components();
  const int d = static_cast<int>(keep.size());
  rep.radius = std::sqrt(analyze::chi_square_upper_quantile(kTail, d));
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

}  // namespace

AnalysisOutput analyze_gmm(const AnalyzeOptions& opt) {
  std::set<Layer> layers;
  if (opt.layers.empty()) {
    layers = kGmmLayers;
  } else {
    for (const auto& name : opt.layers)
      for (Layer l : parse_layer_list(name))
        if (kGmmLayers.count(l)) layers.insert(l);
  }
  AnalysisOutput out;
  out.json = {{"available", true}, {"recordings", nlohmann::json::array()}};
  for (const std::string& path : opt.recordings) {
    RecordingReader reader(path);
    const std::string host = reader.meta_or("host");
    std::vector<Event> events;
    EventFilter filter;
    for (Layer l : layers)
      if (l != Layer::nvml) filter.layers.push_back(l);
    if (!filter.layers.empty()) reader.for_each_event(filter, [&](const Event& e) { events.push_back(e); });
    std::vector<FeatureGroup> groups = analyze::event_feature_groups(events);
    if (layers.count(Layer::nvml)) {
      const bool any_nvml = std::any_of(reader.series().begin(), reader.series().end(),
                                        [](const SeriesInfo& s) { return s.source == "nvml"; });
      if (any_nvml) {
        auto nvml = analyze::nvml_feature_groups(reader.series(), reader.load_samples());
        std::move(nvml.begin(), nvml.end(), std::back_inserter(groups));
      }
    }
    std::vector<Finding> findings;
    std::vector<GroupReport> reports;
    for (const FeatureGroup& g : groups) {
      try {
        reports.push_back(analyze_group(g, host, findings));
      } catch (const analyze::DetectorInputError& e) {
        GroupReport r;
        r.layer = g.layer;
        r.subject = g.subject;
        r.rows = g.x.rows();
        r.skipped = e.what();
        reports.push_back(r);
      }
    }
    std::sort(findings.begin(), findings.end(), [](const Finding& a, const Finding& b) { return a.score > b.score; });
    if (opt.store) store_findings(path, "gmm", findings);

    const int64_t t0 = reader.summary().start_ns;
    nlohmann::json rj{{"recording", path}, {"stored", opt.store}, {"groups", nlohmann::json::array()}};
    std::map<std::string, std::pair<size_t, size_t>> per_layer;  // items, anomalies
    for (const auto& r : reports) {
      nlohmann::json gj{{"layer", r.layer}, {"subject", r.subject}, {"items", r.rows}, {"anomalies", r.anomalies}};
      if (r.skipped.empty()) {
        gj["components"] = r.components;
        gj["features"] = r.features;
        gj["radius_sd"] = r.radius;
      } else {
        gj["skipped"] = r.skipped;
      }
      rj["groups"].push_back(gj);
      per_layer[r.layer].first += static_cast<size_t>(r.rows);
      per_layer[r.layer].second += r.anomalies;
    }
    nlohmann::json fj = nlohmann::json::array();
    for (const auto& f : findings) {
      nlohmann::json ev = nlohmann::json::array();
      for (const auto& e : f.evidence)
        ev.push_back({{"feature", e.feature}, {"value", e.value}, {"expected", e.expected}, {"deviation_sd", e.score}});
      fj.push_back({{"layer", f.layer}, {"subject", f.subject}, {"t_start_ns", f.t_start_ns}, {"t_end_ns", f.t_end_ns},
                    {"score", f.score}, {"summary", f.summary}, {"evidence", ev}});
    }
    rj["findings"] = fj;
    out.json["recordings"].push_back(rj);

    out.text += fmt::format("== gmm (eACGM, per layer): {}\n", path);
    if (per_layer.empty()) out.text += "  no CUDA, NCCL, Torch, Python events or NVML series to analyse\n";
    for (const auto& [layer, c] : per_layer)
      out.text += fmt::format("  {:<7} {} items, {} anomalous\n", layer, c.first, c.second);
    for (const auto& r : reports)
      if (!r.skipped.empty()) out.text += fmt::format("  {:<7} {}: not modelled ({})\n", r.layer, r.subject, r.skipped);
    const size_t shown = std::min<size_t>(findings.size(), 20);
    for (size_t i = 0; i < shown; ++i)
      out.text += fmt::format("  +{:.6f}s  {}\n", static_cast<double>(findings[i].t_start_ns - t0) * 1e-9,
                              findings[i].summary);
    if (findings.size() > shown) out.text += fmt::format("  ... {} more findings (--json for all)\n", findings.size() - shown);
  }
  return out;
}

}  // namespace stackscope::cli
