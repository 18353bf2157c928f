#include "analyze/reveal/reveal_pipeline.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

namespace stackscope::analyze {

RevealStreamingPipeline::RevealStreamingPipeline(std::vector<AttributedColumn> columns, RevealPipelineOptions options)
    : columns_(std::move(columns)), opt_(options), ensemble_(options.ensemble) {
  if (opt_.use_resolutions)
    for (const AttributedColumn& c : columns_) resolution_.push_back(c.resolution);
  for (size_t j = 0; j < columns_.size(); ++j)
    if (columns_[j].detect) detected_.push_back(static_cast<Eigen::Index>(j));
}

void RevealStreamingPipeline::fit(const Eigen::MatrixXd& x, size_t total_windows) {
  if (static_cast<size_t>(x.cols()) != columns_.size())
    throw std::invalid_argument("reveal pipeline: " + std::to_string(columns_.size()) + " column descriptions for " +
                                std::to_string(x.cols()) + " feature columns");
  fitted_ = true;
  out_ = {};
  open_.reset();
  const auto n = static_cast<size_t>(x.rows());
  if (n < std::max<size_t>(opt_.min_windows, 3) || x.cols() == 0) {
    out_.too_short = true;
    return;
  }
  if (detected_.empty()) {  // nothing for the detectors: nothing is flagged
    out_.too_short = true;  // same effect on scoring; the report says why
    out_.no_detector_columns = true;
    return;
  }
  // The detectors see the kept columns only.
  std::vector<double> resolution;
  std::vector<bool> counters;  // with resolutions: only event counters count for leaving a constant baseline
  Eigen::MatrixXd xd(x.rows(), static_cast<Eigen::Index>(detected_.size()));
  for (size_t k = 0; k < detected_.size(); ++k) {
    const Eigen::Index j = detected_[k];
    xd.col(static_cast<Eigen::Index>(k)) = x.col(j);
    if (!opt_.use_resolutions) continue;
    resolution.push_back(resolution_[static_cast<size_t>(j)]);
    counters.push_back(columns_[static_cast<size_t>(j)].feature == WindowFeature::sum);
  }
  ensemble_.fit(xd, resolution, counters);
  detected_row_.resize(static_cast<Eigen::Index>(detected_.size()));
  baseline_ = robust_baseline(x, resolution_, opt_.ensemble.floor.relative);
  for (auto* v : {&z_, &maha_, &iforest_, &score_}) v->reserve(total_windows);
}

void RevealStreamingPipeline::add_window(size_t w, std::span<const double> values) {
  if (!fitted_) throw std::logic_error("reveal pipeline: add_window before fit");
  if (values.size() != columns_.size())
    throw std::invalid_argument("reveal pipeline: a window row of " + std::to_string(values.size()) + " values for " +
                                std::to_string(columns_.size()) + " columns");
  out_.ensemble.flags.push_back(0);
  if (out_.too_short) {
    for (auto* v : {&z_, &maha_, &iforest_, &score_}) v->push_back(0);
    return;
  }
  const Eigen::Map<const Eigen::RowVectorXd> row(values.data(), static_cast<Eigen::Index>(values.size()));
  for (size_t k = 0; k < detected_.size(); ++k) detected_row_(static_cast<Eigen::Index>(k)) = row(detected_[k]);
  const RevealEnsembleResult r = ensemble_.evaluate(detected_row_);
  z_.push_back(r.z(0));
  maha_.push_back(r.maha(0));
  iforest_.push_back(r.iforest(0));
  score_.push_back(r.score(0));
  out_.ensemble.z_threshold = r.z_threshold;
  out_.ensemble.maha_threshold = r.maha_threshold;
  out_.ensemble.iforest_threshold = r.iforest_threshold;
  out_.ensemble.flags.back() = r.flags[0];
  if (!r.flags[0]) return;
  RevealWindowReport rep;
  rep.window = w;
  rep.methods = r.flags[0];
  rep.score = r.score(0);
  rep.attribution = attribute_window(row.transpose(), baseline_, columns_, opt_.attribution);
  out_.windows.push_back(std::move(rep));
  const size_t k = out_.windows.size() - 1;
  const Subsystem sub = out_.windows[k].attribution.subsystem;
  if (open_ && w > out_.windows[k - 1].window + std::max<size_t>(opt_.merge_gap_windows, 1)) close_incident(k);
  if (!open_) {
    open_ = Open{k, sub, kNone};
    return;
  }
  if (sub == open_->subsystem) {
    open_->turn = kNone;
    return;
  }
  // Another subsystem: a turn once it holds for merge_gap_windows flagged windows (a window's length at 3 s / 1 s);
  // a shorter flicker of the attribution stays part of the incident.
  if (open_->turn == kNone || out_.windows[open_->turn].attribution.subsystem != sub) open_->turn = k;
  if (k + 1 - open_->turn >= std::max<size_t>(opt_.merge_gap_windows, 1)) {
    const size_t turn = open_->turn;
    close_incident(turn);
    open_ = Open{turn, sub, kNone};
  }
}

void RevealStreamingPipeline::close_incident(size_t end) {
  if (!open_) return;
  const size_t begin = open_->first;
  open_.reset();
  if (begin >= end) return;
  RevealAnomaly a;
  a.first_window = out_.windows[begin].window;
  a.last_window = out_.windows[end - 1].window;
  std::vector<std::pair<Subsystem, double>> weight;
  double total = 0;
  for (size_t k = begin; k < end; ++k) {
    const RevealWindowReport& rep = out_.windows[k];
    a.methods |= rep.methods;
    ++a.flagged_windows;
    a.agreement = std::max(a.agreement, static_cast<int>(rep.score));  // the score's integer part
    a.score = std::max(a.score, rep.score);
    for (const Contribution& c : rep.attribution.reasons) {
      auto it = std::find_if(a.reasons.begin(), a.reasons.end(), [&](const Contribution& r) { return r.subject == c.subject; });
      if (it == a.reasons.end()) a.reasons.push_back(c);
      else if (std::abs(c.z) > std::abs(it->z)) *it = c;
      auto wt = std::find_if(weight.begin(), weight.end(), [&](const auto& p) { return p.first == c.subsystem; });
      if (wt == weight.end()) weight.emplace_back(c.subsystem, reason_weight(c.z));
      else wt->second += reason_weight(c.z);
      total += reason_weight(c.z);
    }
  }
  double strongest = 0;
  for (const Contribution& c : a.reasons) strongest = std::max(strongest, std::abs(c.z));
  const bool long_run = opt_.long_incident_windows > 0 && a.flagged_windows >= opt_.long_incident_windows;
  if ((a.flagged_windows < opt_.min_incident_windows && a.agreement < opt_.min_agreement) ||
      (strongest < opt_.min_reason_z && !long_run)) {
    ++out_.unconfirmed_incidents;
    return;
  }
  std::stable_sort(weight.begin(), weight.end(), [](const auto& p, const auto& q) { return p.second > q.second; });
  for (const auto& [sub, wt] : weight) a.subsystems.emplace_back(sub, total > 0 ? wt / total : 0);
  if (!a.subsystems.empty()) a.subsystem = a.subsystems.front().first;
  std::stable_sort(a.reasons.begin(), a.reasons.end(),
                   [](const Contribution& p, const Contribution& q) { return std::abs(p.z) > std::abs(q.z); });
  if (a.reasons.size() > opt_.max_reasons_per_anomaly) a.reasons.resize(opt_.max_reasons_per_anomaly);
  out_.anomalies.push_back(std::move(a));
}

RevealPipelineResult RevealStreamingPipeline::finish() {
  auto to_vector = [](const std::vector<double>& v) {
    return Eigen::VectorXd(Eigen::Map<const Eigen::VectorXd>(v.data(), static_cast<Eigen::Index>(v.size())));
  };
  out_.ensemble.z = to_vector(z_);
  out_.ensemble.maha = to_vector(maha_);
  out_.ensemble.iforest = to_vector(iforest_);
  out_.ensemble.score = to_vector(score_);
  close_incident(out_.windows.size());
  return std::move(out_);
}

RevealPipelineResult run_reveal_pipeline(const Eigen::MatrixXd& x, const std::vector<AttributedColumn>& columns,
                                         const RevealPipelineOptions& options) {
  RevealStreamingPipeline p(columns, options);
  p.fit(x, static_cast<size_t>(x.rows()));
  std::vector<double> row(static_cast<size_t>(x.cols()));
  for (Eigen::Index i = 0; i < x.rows(); ++i) {
    for (Eigen::Index j = 0; j < x.cols(); ++j) row[static_cast<size_t>(j)] = x(i, j);
    p.add_window(static_cast<size_t>(i), row);
  }
  return p.finish();
}

std::vector<const RevealAnomaly*> rank_incidents(const std::vector<RevealAnomaly>& incidents) {
  std::vector<const RevealAnomaly*> ranked;
  for (const RevealAnomaly& a : incidents) ranked.push_back(&a);
  std::stable_sort(ranked.begin(), ranked.end(), [](const RevealAnomaly* a, const RevealAnomaly* b) {
    return a->score != b->score ? a->score > b->score : a->flagged_windows > b->flagged_windows;
  });
  return ranked;
}

std::vector<std::pair<Subsystem, double>> secondary_subsystems(const RevealAnomaly& incident, double min_share) {
  std::vector<std::pair<Subsystem, double>> out;
  for (size_t k = 1; k < incident.subsystems.size() && incident.subsystems[k].second >= min_share; ++k)
    out.push_back(incident.subsystems[k]);
  return out;
}

}  // namespace stackscope::analyze
