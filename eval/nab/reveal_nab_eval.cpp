// Scores Reveal's pipeline on NAB's realAWSCloudwatch files (17 of NAB's 58): point-wise precision, recall
// and F1 at a fixed threshold, and the NAB score (standard profile) at that threshold and at the best
// threshold of a sweep (what NAB's own optimiser reports). Build and run: eval/nab/run.sh.
//
// Per file: sliding windows of `window` rows (stride one row) over the single series, the ten dynamic window
// features, the Z / PCA-Mahalanobis / Isolation Forest ensemble fitted on the probationary windows only (NAB's
// first 15%, so nothing later is seen in advance), and each row scored by the window that ends at it.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "analyze/classification_metrics.h"
#include "analyze/nab_score.h"
#include "analyze/reveal_ensemble.h"
#include "analyze/window_features.h"
#include "store/series_csv.h"

using namespace stackscope;
using namespace stackscope::analyze;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: reveal_nab_eval NAB_DIR [window_rows=12] [fixed_threshold=1.0]\n";
    return 2;
  }
  const std::string dir = argv[1];
  const size_t window = argc > 2 ? std::stoul(argv[2]) : 12;
  const double fixed = argc > 3 ? std::stod(argv[3]) : 1.0;
  std::ifstream lf(dir + "/combined_windows.json");
  if (!lf) {
    std::cerr << dir << "/combined_windows.json: cannot read\n";
    return 1;
  }
  const auto labels = nlohmann::json::parse(lf);
  const NabProfile profile = NabProfile::standard();
  std::vector<double> sweep;
  for (double t = 0.25; t <= 3.99; t += 0.05) sweep.push_back(t);
  std::vector<double> raw_at(sweep.size(), 0.0);
  double raw_fixed = 0;
  size_t total_windows = 0;
  std::vector<int> all_labels, all_pred;
  nlohmann::json per_file = nlohmann::json::array();
  for (const auto& [name, wins] : labels.items()) {
    SeriesCsvTable t = read_series_csv(dir + "/" + name);
    const size_t rows = t.t_ns.size();
    std::vector<double> v = t.values[0];
    for (double& x : v)
      if (std::isnan(x)) x = 0;
    // Label windows -> row ranges.
    std::vector<NabWindow> nw;
    for (const auto& w : wins) {
      auto a = parse_csv_timestamp_ns(w[0].get<std::string>()), b = parse_csv_timestamp_ns(w[1].get<std::string>());
      size_t first = std::lower_bound(t.t_ns.begin(), t.t_ns.end(), *a) - t.t_ns.begin();
      size_t last = std::upper_bound(t.t_ns.begin(), t.t_ns.end(), *b) - t.t_ns.begin();
      if (last == 0 || first >= rows) continue;
      nw.push_back({first, last - 1});
    }
    // Windows of `window` rows ending at each row >= window-1.
    const size_t nwin = rows >= window ? rows - window + 1 : 0;
    Eigen::MatrixXd f(static_cast<Eigen::Index>(nwin), static_cast<Eigen::Index>(kDynamicFeatureCount));
    std::array<double, kDynamicFeatureCount> out;
    for (size_t w = 0; w < nwin; ++w) {
      dynamic_window_features(std::span<const double>(v.data() + w, window), std::span<const int64_t>(t.t_ns.data() + w, window), out);
      for (size_t k = 0; k < kDynamicFeatureCount; ++k) f(static_cast<Eigen::Index>(w), static_cast<Eigen::Index>(k)) = out[k];
    }
    const size_t probation = static_cast<size_t>(std::min(std::floor(0.15 * rows), 750.0));
    const size_t fit_rows = probation > window ? probation - window + 1 : 0;
    std::vector<double> score(rows, 0.0);
    if (fit_rows >= 10) {
      RevealEnsemble e;
      e.fit(f.topRows(static_cast<Eigen::Index>(fit_rows)));
      auto r = e.evaluate(f);
      for (size_t w = 0; w < nwin; ++w) score[w + window - 1] = r.score(static_cast<Eigen::Index>(w));
    }
    NabFileScoring prep = nab_prepare(rows, nw, profile);
    total_windows += prep.scored_windows;
    std::vector<uint8_t> det(rows);
    // NAB counts every detected row; an alert is raised once per run of flagged windows (as findings are).
    auto onsets = [&](double thr) {
      std::vector<uint8_t> d(rows, 0);
      for (size_t i = 0; i < rows; ++i) d[i] = score[i] >= thr && (i == 0 || score[i - 1] < thr);
      return d;
    };
    for (size_t k = 0; k < sweep.size(); ++k) raw_at[k] += nab_score_file(prep, onsets(sweep[k]), profile).score;
    auto rs = nab_score_file(prep, onsets(fixed), profile);
    for (size_t i = 0; i < rows; ++i) det[i] = score[i] >= fixed;  // point-wise metrics: every flagged row
    raw_fixed += rs.score;
    std::vector<int> lab, pred;
    for (size_t i = 0; i < rows; ++i) {
      if (prep.window_of[i] == -2) continue;
      lab.push_back(prep.window_of[i] >= 0);
      pred.push_back(det[i]);
    }
    all_labels.insert(all_labels.end(), lab.begin(), lab.end());
    all_pred.insert(all_pred.end(), pred.begin(), pred.end());
    auto m = classification_metrics(lab, pred);
    per_file.push_back({{"file", name}, {"rows", rows}, {"windows", prep.scored_windows},
                        {"windows_detected", rs.windows_detected}, {"fp_points", rs.fp}, {"raw", rs.score},
                        {"precision", m.precision}, {"recall", m.recall}, {"f1", m.f1}});
  }
  size_t best = 0;
  for (size_t k = 1; k < sweep.size(); ++k)
    if (raw_at[k] > raw_at[best]) best = k;
  auto m = classification_metrics(all_labels, all_pred);
  nlohmann::json j = {{"files", per_file.size()}, {"label_windows", total_windows}, {"window_rows", window},
                      {"fixed_threshold", fixed},
                      {"pointwise", {{"precision", m.precision}, {"recall", m.recall}, {"f1", m.f1},
                                     {"tp", m.true_positives}, {"fp", m.false_positives}, {"fn", m.false_negatives}}},
                      {"nab_standard_fixed", nab_normalized(raw_fixed, total_windows, profile)},
                      {"nab_standard_best", nab_normalized(raw_at[best], total_windows, profile)},
                      {"best_threshold", sweep[best]}, {"per_file", per_file}};
  std::cout << j.dump(2) << "\n";
  return 0;
}
