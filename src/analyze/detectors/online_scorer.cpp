#include "analyze/detectors/online_scorer.h"

#include <cmath>

#include "analyze/detectors/gmm_detector.h"
#include "analyze/detectors/thresholds.h"

namespace stackscope::analyze {

OnlineAnomalyScorer::OnlineAnomalyScorer(Eigen::Index dims, OnlineScorerOptions options)
    : dims_(dims), opt_(std::move(options)) {
  if (dims_ < 1) throw DetectorInputError("online scorer: needs at least one feature");
  if (opt_.horizon_ns <= 0) throw DetectorInputError("online scorer: horizon must be > 0");
  if (!opt_.make_detector) {
    const DetectorConfig cfg = opt_.detector;
    make_detector(cfg);  // an unknown method fails here, not in the background
    opt_.make_detector = [cfg] { return stackscope::analyze::make_detector(cfg); };
  }
  opt_.min_train_items = std::max<size_t>(opt_.min_train_items, 2);
}

OnlineAnomalyScorer::~OnlineAnomalyScorer() { wait_for_refit(); }

void OnlineAnomalyScorer::wait_for_refit() {
  if (worker_.joinable()) worker_.join();
}

size_t OnlineAnomalyScorer::horizon_items() const { return sealed_items_ + open_.t.size(); }

std::string OnlineAnomalyScorer::last_error() const {
  std::lock_guard lock(error_mu_);
  return last_error_;
}

OnlineScore OnlineAnomalyScorer::observe(int64_t t_ns, const Eigen::Ref<const Eigen::RowVectorXd>& features) {
  if (features.size() != dims_)
    throw DetectorInputError("online scorer: item has " + std::to_string(features.size()) + " features, expected " +
                             std::to_string(dims_));
  for (Eigen::Index c = 0; c < dims_; ++c)
    if (!std::isfinite(features(c)))
      throw DetectorInputError("online scorer: feature " + std::to_string(c) + " is not finite");
  OnlineScore out;
  if (auto m = model_.load()) {
    const Eigen::MatrixXd row = features;
    out.score = m->detector->score(row)(0);
    out.anomaly = out.score > m->threshold;
    out.scored = true;
    out.model_version = m->version;
  }
  if (out.anomaly && !opt_.learn_flagged) return out;  // kept out of the horizon (and of refit timing)
  open_.t.push_back(t_ns);
  open_.values.insert(open_.values.end(), features.data(), features.data() + dims_);
  if (open_.t.size() == kChunkRows) {
    sealed_items_ += open_.t.size();
    sealed_.push_back(std::make_shared<const Chunk>(std::move(open_)));
    open_ = Chunk{};
  }
  // Forget whole chunks that fell out of the horizon (the fit filters the rest by time).
  const int64_t from = t_ns - opt_.horizon_ns;
  while (!sealed_.empty() && sealed_.front()->t.back() < from) {
    sealed_items_ -= sealed_.front()->t.size();
    sealed_.pop_front();
  }
  // First model as soon as there are enough items; later (or after a failed first fit) every refit interval.
  const bool interval_passed = last_fit_ns_ == INT64_MIN || t_ns - last_fit_ns_ >= opt_.refit_interval_ns;
  const bool due = interval_passed && horizon_items() >= opt_.min_train_items;
  if (due && !fitting_.load()) start_refit(t_ns);
  return out;
}

void OnlineAnomalyScorer::start_refit(int64_t now_ns) {
  wait_for_refit();  // the previous worker has finished (fitting_ is false): joining is immediate
  std::vector<std::shared_ptr<const Chunk>> chunks(sealed_.begin(), sealed_.end());
  if (!open_.t.empty()) chunks.push_back(std::make_shared<const Chunk>(open_));  // at most kChunkRows rows copied
  last_fit_ns_ = now_ns;
  fitting_ = true;
  worker_ = std::thread(&OnlineAnomalyScorer::refit, this, std::move(chunks), now_ns - opt_.horizon_ns, now_ns,
                        next_version_++);
}

void OnlineAnomalyScorer::refit(std::vector<std::shared_ptr<const Chunk>> chunks, int64_t from_ns, int64_t now_ns,
                                uint64_t version) {
  try {
    size_t n = 0;
    for (auto& c : chunks)
      for (int64_t t : c->t) n += t >= from_ns;
    const size_t stride = (n + opt_.max_train_items - 1) / opt_.max_train_items;  // even sub-sample
    Eigen::MatrixXd x((n + stride - 1) / stride, dims_);
    size_t seen = 0;
    Eigen::Index row = 0;
    int64_t first = INT64_MAX;
    for (auto& c : chunks)
      for (size_t i = 0; i < c->t.size(); ++i) {
        if (c->t[i] < from_ns) continue;
        if (seen++ % stride) continue;
        first = std::min(first, c->t[i]);
        x.row(row++) = Eigen::Map<const Eigen::RowVectorXd>(c->values.data() + i * static_cast<size_t>(dims_), dims_);
      }
    x.conservativeResize(row, dims_);
    std::shared_ptr<AnomalyDetector> det = opt_.make_detector();
    det->fit(x);
    auto m = std::make_shared<OnlineModel>();
    m->threshold = (opt_.delta > 0 && det->name() == "gmm") ? GmmDetector::threshold_for_delta(opt_.delta)
                                                            : threshold_at_quantile(det->score(x), opt_.quantile);
    m->detector = std::move(det);
    m->trained_from_ns = first;
    m->trained_until_ns = now_ns;
    m->trained_items = static_cast<size_t>(row);
    m->version = version;
    model_.store(std::shared_ptr<const OnlineModel>(std::move(m)));
    refits_.fetch_add(1);
    std::lock_guard lock(error_mu_);
    last_error_.clear();
  } catch (const std::exception& e) {
    std::lock_guard lock(error_mu_);
    last_error_ = e.what();  // the old model stays in service
  }
  fitting_ = false;
}

}  // namespace stackscope::analyze
