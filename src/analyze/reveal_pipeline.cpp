#include "analyze/reveal_pipeline.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

namespace stackscope::analyze {

RevealPipelineResult run_reveal_pipeline(const Eigen::MatrixXd& x, const std::vector<AttributedColumn>& columns,
                                         const RevealPipelineOptions& options) {
  if (static_cast<size_t>(x.cols()) != columns.size())
    throw std::invalid_argument("reveal pipeline: " + std::to_string(columns.size()) + " column descriptions for " +
                                std::to_string(x.cols()) + " feature columns");
  RevealPipelineResult out;
  const auto n = static_cast<size_t>(x.rows());
  if (n < std::max<size_t>(options.min_windows, 3) || x.cols() == 0) {
    out.too_short = true;
    out.ensemble.flags.assign(n, 0);
    out.ensemble.score = Eigen::VectorXd::Zero(x.rows());
    return out;
  }
  RevealEnsemble ensemble(options.ensemble);
  ensemble.fit(x);
  out.ensemble = ensemble.evaluate(x);
  const FeatureBaseline baseline = robust_baseline(x);
  for (size_t w = 0; w < n; ++w) {
    if (!out.ensemble.flags[w]) continue;
    RevealWindowReport r;
    r.window = w;
    r.methods = out.ensemble.flags[w];
    r.score = out.ensemble.score(static_cast<Eigen::Index>(w));
    r.attribution = attribute_window(x.row(static_cast<Eigen::Index>(w)), baseline, columns, options.attribution);
    out.windows.push_back(std::move(r));
  }
  // Join overlapping flagged windows (consecutive indices) that point at the same subsystem.
  for (const RevealWindowReport& r : out.windows) {
    const bool extend = !out.anomalies.empty() && out.anomalies.back().last_window + 1 == r.window &&
                        out.anomalies.back().subsystem == r.attribution.subsystem;
    if (!extend) {
      RevealAnomaly a;
      a.first_window = r.window;
      a.subsystem = r.attribution.subsystem;
      out.anomalies.push_back(a);
    }
    RevealAnomaly& a = out.anomalies.back();
    a.last_window = r.window;
    a.methods |= r.methods;
    a.score = std::max(a.score, r.score);
    for (const Contribution& c : r.attribution.reasons) {
      auto it = std::find_if(a.reasons.begin(), a.reasons.end(), [&](const Contribution& k) { return k.subject == c.subject; });
      if (it == a.reasons.end()) a.reasons.push_back(c);
      else if (std::abs(c.z) > std::abs(it->z)) *it = c;
    }
  }
  for (RevealAnomaly& a : out.anomalies) {
    std::stable_sort(a.reasons.begin(), a.reasons.end(),
                     [](const Contribution& p, const Contribution& q) { return std::abs(p.z) > std::abs(q.z); });
    if (a.reasons.size() > options.max_reasons_per_anomaly) a.reasons.resize(options.max_reasons_per_anomaly);
  }
  return out;
}

}  // namespace stackscope::analyze
