// stackscope detect: runs one engine detector over any numeric CSV (fit on --train, or on --input when no
// training file is given) and writes one score per input row.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "analyze/detector_factory.h"
#include "analyze/thresholds.h"
#include "cli/registry.h"
#include "store/numeric_csv.h"

namespace stackscope::cli {
namespace {

using analyze::DetectorInputError;

struct DetectCliOptions {
  analyze::DetectorConfig config;
  std::string train, input, output;
  std::optional<double> delta, quantile;
  std::string covariance = "full";
  std::string aggregate = "mean";
  bool json = false;
};

Eigen::MatrixXd to_matrix(const NumericTable& t) {
  return Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
      t.values.data(), static_cast<Eigen::Index>(t.rows()), static_cast<Eigen::Index>(t.columns.size()));
}

// Detector errors name a 0-based row and column of the matrix; say it in the CSV's terms.
std::string describe_columns(const std::vector<std::string>& cols) {
  std::string s;
  for (size_t i = 0; i < cols.size(); ++i) s += fmt::format("{}{}={}", i ? ", " : "", i, cols[i]);
  return s;
}

nlohmann::json model_summary(const analyze::AnomalyDetector& d) {
  nlohmann::json j;
  if (auto* g = dynamic_cast<const analyze::GmmDetector*>(&d)) {
    j["components"] = g->chosen_components();
    j["covariance"] = std::string(analyze::covariance_type_name(g->model().covariance_type()));
    j["weights"] = std::vector<double>(g->model().weights().data(), g->model().weights().data() + g->chosen_components());
    j["mean_log_likelihood"] = g->fit_result().mean_log_likelihood;
    j["em_iterations"] = g->fit_result().iterations;
    j["converged"] = g->fit_result().converged;
    if (!g->bic_by_components().empty()) j["bic_by_components"] = g->bic_by_components();
  } else if (auto* k = dynamic_cast<const analyze::KMeansDetector*>(&d)) {
    j["clusters"] = k->result().centers.rows();
    j["inertia"] = k->result().inertia;
  } else if (auto* f = dynamic_cast<const analyze::IsolationForest*>(&d)) {
    j["trees"] = f->trees();
    j["samples_per_tree"] = f->samples_per_tree();
    j["nodes"] = f->nodes();
  } else if (auto* b = dynamic_cast<const analyze::DbscanDetector*>(&d)) {
    j["eps"] = b->eps();
    j["clusters"] = b->clusters();
    j["core_points"] = b->core_points();
  } else if (auto* p = dynamic_cast<const analyze::PcaMahalanobis*>(&d)) {
    j["components"] = p->components();
    j["explained_variance"] = p->explained_variance();
  } else if (auto* z = dynamic_cast<const analyze::ZScore*>(&d)) {
    j["aggregate"] = z->options().aggregate == analyze::ZScoreOptions::Aggregate::max_abs ? "max" : "mean";
  }
  return j;
}

int run_detect(DetectCliOptions& opt) {
  auto& cfg = opt.config;
  cfg.gmm.covariance = *analyze::parse_covariance_type(opt.covariance);
  cfg.zscore.aggregate = opt.aggregate == "max" ? analyze::ZScoreOptions::Aggregate::max_abs
                                                : analyze::ZScoreOptions::Aggregate::mean_abs;
  if (opt.delta && cfg.method != "gmm")
    throw std::invalid_argument("--delta is the GMM density threshold (eACGM Definition 1); use --quantile for " +
                                cfg.method);
  if (opt.delta && !(*opt.delta > 0)) throw std::invalid_argument("--delta must be > 0");

  const NumericTable test = read_numeric_csv(opt.input);
  std::optional<NumericTable> train;
  if (!opt.train.empty()) {
    train = read_numeric_csv(opt.train);
    if (train->columns != test.columns)
      throw std::invalid_argument(fmt::format("{} and {} have different columns ({} vs {})", opt.train, opt.input,
                                              describe_columns(train->columns), describe_columns(test.columns)));
  }
  const NumericTable& fit_on = train ? *train : test;
  const std::string fit_name = train ? opt.train : opt.input;
  const Eigen::MatrixXd x_fit = to_matrix(fit_on);
  const Eigen::MatrixXd x_test = train ? to_matrix(test) : x_fit;

  auto detector = analyze::make_detector(cfg);
  Eigen::VectorXd train_scores, scores;
  try {
    detector->fit(x_fit);
    train_scores = detector->score(x_fit);
    scores = train ? detector->score(x_test) : train_scores;
  } catch (const DetectorInputError& e) {
    throw std::invalid_argument(fmt::format("{}: {} (columns: {})", fit_name, e.what(), describe_columns(fit_on.columns)));
  }
  if (!scores.allFinite() || !train_scores.allFinite())
    throw std::runtime_error(cfg.method + " produced a non-finite score");  // engine bug guard: never write NaN

  double threshold;
  std::string rule;
  if (opt.delta) {
    threshold = analyze::GmmDetector::threshold_for_delta(*opt.delta);
    rule = fmt::format("density under the most likely component < delta {}", *opt.delta);
  } else if (!opt.quantile && cfg.method == "dbscan") {
    threshold = 1.0;
    rule = "DBSCAN noise: farther than eps from every core point";
  } else {
    const double q = opt.quantile.value_or(0.99);
    threshold = analyze::threshold_at_quantile(train_scores, q);
    rule = fmt::format("score above the {} quantile of the training scores", q);
  }

  std::ofstream out(opt.output, std::ios::binary);
  if (!out) throw std::runtime_error("cannot write " + opt.output);
  out << "score,anomaly\n";
  size_t anomalies = 0;
  for (Eigen::Index i = 0; i < scores.size(); ++i) {
    const bool a = scores(i) > threshold;
    anomalies += a;
    out << fmt::format("{},{}\n", scores(i), a ? 1 : 0);
  }
  out.close();
  if (!out) throw std::runtime_error("write failed: " + opt.output);

  if (opt.json) {
    nlohmann::json j{{"method", cfg.method},
                     {"input", opt.input},
                     {"train", fit_name},
                     {"rows", scores.size()},
                     {"train_rows", x_fit.rows()},
                     {"columns", fit_on.columns},
                     {"anomalies", anomalies},
                     {"threshold", threshold},
                     {"threshold_rule", rule},
                     {"model", model_summary(*detector)}};
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << fmt::format("{}: {} of {} rows anomalous ({}; threshold {:.6g}) -> {}\n", cfg.method, anomalies,
                             scores.size(), rule, threshold, opt.output);
  }
  return 0;
}

RegisterCommand reg("detect", 35, [](CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<DetectCliOptions>();
  auto& c = opt->config;
  auto* cmd = app.add_subcommand("detect", "Score the rows of a numeric CSV with one anomaly detector");
  cmd->add_option("--method", c.method, "gmm (eACGM) | kmeans | iforest | dbscan | zscore | pca")
      ->required()
      ->check(CLI::IsMember(analyze::detector_methods()));
  cmd->add_option("--train", opt->train, "CSV to fit on (default: the --input file itself)")->check(CLI::ExistingFile);
  cmd->add_option("--input", opt->input, "CSV to score: header row, one numeric row per item")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--output", opt->output, "Scores CSV: columns score (higher is more anomalous), anomaly (0/1)")
      ->required();
  auto* delta = cmd->add_option("--delta", opt->delta,
                                "gmm: flag rows whose density under the most likely component is below D");
  cmd->add_option("--quantile", opt->quantile,
                  "Flag rows scoring above this quantile of the training scores (default 0.99; dbscan default: "
                  "its own noise rule)")
      ->check(CLI::Range(0.0, 1.0))
      ->excludes(delta);
  cmd->add_option("--components", c.gmm.components, "gmm: components K (0: chosen by BIC, the default)")
      ->check(CLI::NonNegativeNumber)
      ->each([opt](const std::string& v) { opt->config.kmeans.kmeans.clusters = std::max(1, std::stoi(v)); });
  cmd->add_option("--max-components", c.gmm.max_components, "gmm: largest K tried by BIC (default 8)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--covariance", opt->covariance, "gmm: full | diag (default full)")
      ->check(CLI::IsMember({"full", "diag", "diagonal"}));
  cmd->add_option("--restarts", c.gmm.restarts, "gmm, kmeans: independent initialisations (default 3)")
      ->check(CLI::PositiveNumber)
      ->each([opt](const std::string& v) { opt->config.kmeans.kmeans.restarts = std::stoi(v); });
  cmd->add_option("--max-iterations", c.gmm.max_iterations, "gmm, kmeans: iteration cap (default 100)")
      ->check(CLI::PositiveNumber)
      ->each([opt](const std::string& v) { opt->config.kmeans.kmeans.max_iterations = std::stoi(v); });
  cmd->add_option("--reg-covar", c.gmm.reg_covar, "gmm: added to covariance diagonals (default 1e-6)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", c.gmm.seed, "Random seed (gmm, kmeans, iforest, dbscan sub-sampling; default 0)")
      ->each([opt](const std::string& v) {
        const uint64_t s = std::stoull(v);
        opt->config.kmeans.kmeans.seed = s;
        opt->config.iforest.seed = s;
        opt->config.dbscan.seed = s;
      });
  cmd->add_option("--clusters", c.kmeans.kmeans.clusters, "kmeans: clusters (default 8, or --components)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--trees", c.iforest.trees, "iforest: trees (default 100)")->check(CLI::PositiveNumber);
  cmd->add_option("--max-samples", c.iforest.max_samples, "iforest: rows per tree (default 256)")
      ->check(CLI::Range(2, 1 << 30));
  cmd->add_option("--eps", c.dbscan.eps,
                  "dbscan: neighbourhood radius in standardised units (default: from the data's k-distances)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--min-points", c.dbscan.min_points, "dbscan: neighbours that make a core point (default 5)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--variance", c.pca.variance_fraction, "pca: share of variance the kept components hold (default 0.95)")
      ->check(CLI::Range(1e-9, 1.0));
  cmd->add_option("--aggregate", opt->aggregate, "zscore: mean | max of the absolute z-scores of a row (default mean)")
      ->check(CLI::IsMember({"mean", "max"}));
  cmd->add_flag("--json", opt->json, "Print a JSON summary (rows, anomalies, threshold, model parameters)");
  cmd->footer(
      "Scores: gmm -log density under the most likely component (eACGM Algorithm 2); kmeans distance to the\n"
      "nearest centre; iforest 2^(-mean path/c(n)); dbscan distance to the nearest core point / eps; zscore\n"
      "mean (or max) |z|; pca Mahalanobis distance in the PCA subspace. Features other than gmm's are\n"
      "standardised by the training data.\n"
      "Examples:\n"
      "  stackscope detect --method gmm --train normal.csv --input test.csv --output scores.csv --delta 1e-4\n"
      "  stackscope detect --method iforest --input data.csv --output scores.csv --quantile 0.99 --json");
  cmd->callback([opt, &exit_code] {
    try {
      exit_code = run_detect(*opt);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "stackscope detect: error: %s\n", e.what());
      exit_code = 1;
    }
  });
});

}  // namespace
}  // namespace stackscope::cli
