// eACGM's online mode: "trains a GMM over recent data (e.g. past hour)" and scores each new event as it comes.
// observe() scores an item with the current model and adds it to the sliding horizon; when a refit is due it
// starts one in a background thread and keeps scoring with the old model. The new model is published by an
// atomic swap of a shared_ptr<const model>, so scoring never waits on a fit.
#pragma once
#include <Eigen/Dense>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "analyze/detectors/detector.h"
#include "analyze/detectors/detector_factory.h"

namespace stackscope::analyze {

struct OnlineScorerOptions {
  int64_t horizon_ns = 3'600'000'000'000;      // train on the items of the last hour
  int64_t refit_interval_ns = 60'000'000'000;  // refit when the newest item is this far past the last fit
  size_t min_train_items = 64;                 // no model (and no score) before this many items
  size_t max_train_items = 200'000;            // a larger horizon is sub-sampled evenly for the fit
  double quantile = 0.99;                      // anomaly threshold: this quantile of the training scores...
  double delta = 0;                            // ...or, for gmm when > 0, eACGM's density threshold
  DetectorConfig detector;                     // what to fit (default: gmm, K by BIC)
  // Whether an item the current model flags joins the horizon. Yes (eACGM's "recent data"): a lasting change
  // becomes normal once it fills the horizon, but so does a fault class once one episode of it is in there (the
  // threshold, a quantile of the horizon's scores, rises to it). No: faults stay out of every fit, but so does a
  // lasting change, which stays flagged until it ends.
  bool learn_flagged = true;
  // Overrides `detector` when set (tests, custom detectors).
  std::function<std::unique_ptr<AnomalyDetector>()> make_detector;
};

struct OnlineModel {
  std::shared_ptr<const AnomalyDetector> detector;
  double threshold = 0;
  int64_t trained_from_ns = 0, trained_until_ns = 0;
  size_t trained_items = 0;
  uint64_t version = 0;  // 1 for the first model
};

struct OnlineScore {
  bool scored = false;    // false until the first model exists
  double score = 0;
  bool anomaly = false;
  uint64_t model_version = 0;
};

class OnlineAnomalyScorer {
 public:
  OnlineAnomalyScorer(Eigen::Index dims, OnlineScorerOptions options = {});
  ~OnlineAnomalyScorer();  // waits for a running refit
  OnlineAnomalyScorer(const OnlineAnomalyScorer&) = delete;
  OnlineAnomalyScorer& operator=(const OnlineAnomalyScorer&) = delete;

  // Scores `features` (one row, `dims` values) with the current model, then adds it to the horizon and starts
  // a background refit when one is due and none is running. Call from one thread; items in time order.
  // Throws DetectorInputError for a wrong width or a non-finite value.
  OnlineScore observe(int64_t t_ns, const Eigen::Ref<const Eigen::RowVectorXd>& features);

  std::shared_ptr<const OnlineModel> model() const { return model_.load(); }
  bool refitting() const { return fitting_.load(); }
  void wait_for_refit();
  uint64_t refits() const { return refits_.load(); }
  size_t horizon_items() const;   // items currently kept
  std::string last_error() const;  // why the last refit failed ("" when it did not)

 private:
  struct Chunk {
    std::vector<int64_t> t;
    std::vector<double> values;  // row-major
  };
  static constexpr size_t kChunkRows = 256;
  void start_refit(int64_t now_ns);
  void refit(std::vector<std::shared_ptr<const Chunk>> chunks, int64_t from_ns, int64_t now_ns, uint64_t version);

  Eigen::Index dims_;
  OnlineScorerOptions opt_;
  // Items: sealed chunks are immutable and shared with a running fit; `open_` is the one being filled.
  std::deque<std::shared_ptr<const Chunk>> sealed_;
  Chunk open_;
  size_t sealed_items_ = 0;
  int64_t last_fit_ns_ = INT64_MIN;
  uint64_t next_version_ = 1;
  std::atomic<std::shared_ptr<const OnlineModel>> model_;
  std::atomic<bool> fitting_{false};
  std::atomic<uint64_t> refits_{0};
  std::thread worker_;
  mutable std::mutex error_mu_;
  std::string last_error_;
};

}  // namespace stackscope::analyze
