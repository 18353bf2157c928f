// stackscope detect: runs one engine detector over any numeric CSV (fit on --train, or on --input when no
// training file is given) and writes one score per input row.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "analyze/detectors/detector_factory.h"
#include "analyze/detectors/online_scorer.h"
#include "analyze/detectors/thresholds.h"
#include "cli/registry.h"
#include "store/bounded_csv.h"
#include "store/numeric_csv.h"
#include "store/output_file.h"

namespace stackscope::cli {
namespace {

using analyze::DetectorInputError;

struct DetectCliOptions {
  analyze::DetectorConfig config;
  std::string train, input, output;
  std::optional<double> delta, quantile;
  std::string covariance = "full";
  std::string aggregate = "mean";
  std::string constant_columns = "error";
  analyze::ScaleFloor floor{.relative = 1e-3, .absolute = 1e-3};
  std::vector<std::string> ignore_columns;
  bool json = false;
  // --online: the engine's online scorer (analyze/online_scorer.h) replayed over the rows in time order.
  bool online = false;
  std::string time_column;   // nanoseconds when its name ends in _ns, else seconds; none: --row-interval
  double row_interval_s = 1;
  double horizon_s = 3600, refit_every_s = 60;
  size_t min_train_rows = 64;
  bool exclude_flagged = false;
};

Eigen::MatrixXd to_matrix(const NumericTable& t) {
  return Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
      t.values.data(), static_cast<Eigen::Index>(t.rows()), static_cast<Eigen::Index>(t.columns.size()));
}

// The table without the named columns (time stamps, labels). Throws when a name is not a column.
NumericTable without_columns(const NumericTable& t, const std::vector<std::string>& drop, const std::string& path) {
  if (drop.empty()) return t;
  for (const auto& d : drop)
    if (std::find(t.columns.begin(), t.columns.end(), d) == t.columns.end())
      throw std::invalid_argument(fmt::format("--ignore-columns: {} has no column '{}'", path, d));
  NumericTable out;
  std::vector<size_t> keep;
  for (size_t c = 0; c < t.columns.size(); ++c)
    if (std::find(drop.begin(), drop.end(), t.columns[c]) == drop.end()) {
      keep.push_back(c);
      out.columns.push_back(t.columns[c]);
    }
  if (keep.empty()) throw std::invalid_argument(fmt::format("--ignore-columns leaves no column of {}", path));
  for (size_t r = 0; r < t.rows(); ++r)
    for (size_t c : keep) out.values.push_back(t.values[r * t.columns.size() + c]);
  return out;
}

// The default refuses a column that is constant in the training data (it carries nothing to learn from);
// --constant-columns floor keeps it, scaled by the floor, so that a row moving it scores as far out.
void require_varying(const Eigen::MatrixXd& x, const NumericTable& t, const std::string& path,
                     const analyze::ScaleFloor& floor) {
  const auto constant = analyze::constant_columns(x);
  if (constant.empty()) return;
  std::string names;
  for (size_t i = 0; i < constant.size() && i < 8; ++i)
    names += fmt::format("{}{}", i ? ", " : "", quote_excerpt(t.columns[static_cast<size_t>(constant[i])], 40));
  if (constant.size() > 8) names += fmt::format(" and {} more", constant.size() - 8);
  const double v = x(0, constant[0]);
  throw std::invalid_argument(fmt::format(
      "{}: column {} {} constant in the training data (first: every row is {}): nothing to learn from. Drop {} "
      "(--ignore-columns), or pass --constant-columns floor to keep {} with its scale floored at max({} x |value|, "
      "{}), so that a row that moves {} scores far out",
      path, names, constant.size() > 1 ? "are" : "is", v, constant.size() > 1 ? "them" : "it",
      constant.size() > 1 ? "them" : "it", floor.relative, floor.absolute, constant.size() > 1 ? "one" : "it"));
}

// Detector errors name a 0-based row and column of the matrix; say it in the CSV's terms. The first few columns
// only: a message listing 10,000 of them would bury the error.
std::string describe_columns(const std::vector<std::string>& cols) {
  constexpr size_t kShown = 8;
  std::string s;
  for (size_t i = 0; i < cols.size() && i < kShown; ++i)
    s += fmt::format("{}{}={}", i ? ", " : "", i, quote_excerpt(cols[i], 40));
  if (cols.size() > kShown) s += fmt::format(" and {} more", cols.size() - kShown);
  return s;
}

// Where two tables' columns part: their counts and the first column that differs.
std::string column_difference(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  auto at = [&](const std::vector<std::string>& cols) { return i < cols.size() ? quote_excerpt(cols[i], 40) : "none"; };
  return fmt::format("{} columns vs {}; column {} is {} vs {}", a.size(), b.size(), i + 1, at(a), at(b));
}

nlohmann::json model_summary(const analyze::AnomalyDetector& d) {
  nlohmann::json j;
  if (auto* g = dynamic_cast<const analyze::GmmDetector*>(&d)) {
    j["components"] = g->chosen_components();
    j["covariance"] = std::string(analyze::covariance_type_name(g->model().covariance_type()));
    j["weights"] = std::vector<double>(g->model().weights().data(), g->model().weights().data() + g->chosen_components());
    // Per row, in the CSV's units like the scores (the model itself lives in standardised units).
    j["mean_log_likelihood"] = g->fit_result().mean_log_likelihood - g->scaling().log_scale_sum();
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

// Each row's time in ns: from --time-column (then dropped from the features), else row index x --row-interval.
// Throws for a time that is not finite or out of int64 nanoseconds, naming the row.
std::vector<int64_t> row_times(NumericTable& t, const DetectCliOptions& opt, const std::string& path,
                               int64_t first_index) {
  std::vector<int64_t> times(t.rows());
  if (opt.time_column.empty()) {
    for (size_t r = 0; r < t.rows(); ++r) {
      const double v = static_cast<double>(first_index + static_cast<int64_t>(r)) * opt.row_interval_s * 1e9;
      if (v > 9e18)
        throw std::invalid_argument(fmt::format("{}: row {}: --row-interval puts it past int64 nanoseconds", path, r + 2));
      times[r] = static_cast<int64_t>(std::llround(v));
    }
    return times;
  }
  const auto it = std::find(t.columns.begin(), t.columns.end(), opt.time_column);
  if (it == t.columns.end())
    throw std::invalid_argument(fmt::format("--time-column: {} has no column '{}'", path, opt.time_column));
  const size_t c = static_cast<size_t>(it - t.columns.begin());
  const bool ns = opt.time_column.size() > 3 && opt.time_column.ends_with("_ns");
  for (size_t r = 0; r < t.rows(); ++r) {
    const double v = t.values[r * t.columns.size() + c] * (ns ? 1.0 : 1e9);
    if (!std::isfinite(v) || std::abs(v) > 9e18)
      throw std::invalid_argument(fmt::format("{}: row {}: time {} is not a usable time", path, r + 2, opt.time_column));
    times[r] = static_cast<int64_t>(std::llround(v));
  }
  t = without_columns(t, {opt.time_column}, path);
  return times;
}

// --online: the rows go through OnlineAnomalyScorer in time order (--train's rows first, to warm the horizon up,
// their scores not written). Each row is scored by the model of the rows before it; a refit is started once the
// newest row is --refit-every past the last one and fits the last --horizon. A replay waits for each refit to
// finish before the next row, so its output does not depend on the machine's speed (live, scoring never waits).
int run_detect_online(DetectCliOptions& opt) {
  constexpr double kMaxSeconds = 1e9;  // ~31 years: keeps every duration well inside int64 nanoseconds
  for (double v : {opt.horizon_s, opt.refit_every_s, opt.row_interval_s})
    if (!(v > 0 && v <= kMaxSeconds))
      throw std::invalid_argument("--horizon, --refit-every and --row-interval must be > 0 and at most 1e9 seconds");
  if (opt.config.method == "dbscan")
    throw std::invalid_argument("--online: dbscan has no training-score quantile to threshold by; use another method");
  NumericTable test = without_columns(read_numeric_csv(opt.input), opt.ignore_columns, opt.input);
  std::optional<NumericTable> train;
  std::vector<int64_t> train_t;
  if (!opt.train.empty()) {
    train = without_columns(read_numeric_csv(opt.train), opt.ignore_columns, opt.train);
    train_t = row_times(*train, opt, opt.train, 0);
  }
  const std::vector<int64_t> test_t =
      row_times(test, opt, opt.input, train ? static_cast<int64_t>(train->rows()) : 0);
  if (train && train->columns != test.columns)
    throw std::invalid_argument(fmt::format("{} and {} have different columns ({})", opt.train, opt.input,
                                            column_difference(train->columns, test.columns)));

  analyze::OnlineScorerOptions so;
  so.horizon_ns = static_cast<int64_t>(opt.horizon_s * 1e9);
  so.refit_interval_ns = static_cast<int64_t>(opt.refit_every_s * 1e9);
  so.min_train_items = opt.min_train_rows;
  so.quantile = opt.quantile.value_or(0.99);
  so.delta = opt.delta.value_or(0);
  so.detector = opt.config;
  so.learn_flagged = !opt.exclude_flagged;
  analyze::OnlineAnomalyScorer scorer(static_cast<Eigen::Index>(test.columns.size()), so);

  int64_t last_t = INT64_MIN;
  auto feed = [&](const NumericTable& t, const std::vector<int64_t>& times, const std::string& path, auto&& on_score) {
    const auto x = to_matrix(t);
    for (Eigen::Index r = 0; r < x.rows(); ++r) {
      const auto i = static_cast<size_t>(r);
      if (times[i] < last_t)
        throw std::invalid_argument(fmt::format("{}: row {}: time goes backwards (--online needs rows in time order)",
                                                path, i + 2));
      last_t = times[i];
      analyze::OnlineScore sc;
      try {
        sc = scorer.observe(times[i], x.row(r));
      } catch (const DetectorInputError& e) {
        throw std::invalid_argument(fmt::format("{}: row {}: {} (columns: {})", path, i + 2, e.what(),
                                                describe_columns(t.columns)));
      }
      if (scorer.refitting()) scorer.wait_for_refit();
      on_score(sc);
    }
  };
  if (train) feed(*train, train_t, opt.train, [](const analyze::OnlineScore&) {});

  OutputFile file(opt.output, {.inputs = {opt.input, opt.train}, .what = "--output"});
  std::ostream& out = file.stream();
  out << "score,anomaly,model\n";
  size_t anomalies = 0, scored = 0;
  feed(test, test_t, opt.input, [&](const analyze::OnlineScore& sc) {
    if (sc.scored && !std::isfinite(sc.score))
      throw std::runtime_error(opt.config.method + " produced a non-finite score");  // never write NaN
    scored += sc.scored;
    anomalies += sc.anomaly;
    if (sc.scored)
      out << fmt::format("{},{},{}\n", sc.score, sc.anomaly ? 1 : 0, sc.model_version);
    else
      out << ",0,0\n";  // no model yet: not scored
  });
  file.commit();

  const std::string rule =
      opt.delta ? fmt::format("density under the most likely component < delta {}", *opt.delta)
                : fmt::format("score above the {} quantile of the horizon's own scores", so.quantile);
  const auto model = scorer.model();
  if (opt.json) {
    nlohmann::json j{{"method", opt.config.method},
                     {"online", true},
                     {"input", opt.input},
                     {"rows", test.rows()},
                     {"scored_rows", scored},
                     {"anomalies", anomalies},
                     {"refits", scorer.refits()},
                     {"horizon_s", opt.horizon_s},
                     {"refit_every_s", opt.refit_every_s},
                     {"exclude_flagged", opt.exclude_flagged},
                     {"threshold_rule", rule},
                     {"last_refit_error", scorer.last_error()},
                     {"columns", test.columns}};
    if (model)
      j["last_model"] = {{"version", model->version},
                         {"threshold", model->threshold},
                         {"trained_rows", model->trained_items},
                         {"model", model_summary(*model->detector)}};
    std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::cout << fmt::format("{} online: {} of {} rows anomalous, {} scored ({} refits; {}) -> {}\n",
                             opt.config.method, anomalies, test.rows(), scored, scorer.refits(), rule, opt.output);
  }
  if (!scorer.last_error().empty())
    std::fprintf(stderr, "stackscope detect: the last refit failed (the model before it stayed in service): %s\n",
                 scorer.last_error().c_str());
  if (scored == 0)
    std::fprintf(stderr, "stackscope detect: no row was scored: fewer than %zu rows came before the last one, or every "
                 "fit failed\n", opt.min_train_rows);
  return 0;
}

int run_detect(DetectCliOptions& opt) {
  // Before any work: the scores never replace an input, nor go through a symlink (store/output_file.h).
  check_output_path(opt.output, {opt.input, opt.train}, "--output");
  auto& cfg = opt.config;
  cfg.gmm.covariance = *analyze::parse_covariance_type(opt.covariance);
  cfg.zscore.aggregate = opt.aggregate == "max" ? analyze::ZScoreOptions::Aggregate::max_abs
                                                : analyze::ZScoreOptions::Aggregate::mean_abs;
  if (opt.delta && cfg.method != "gmm")
    throw std::invalid_argument("--delta is the GMM density threshold (eACGM Definition 1); use --quantile for " +
                                cfg.method);
  if (opt.delta && !(*opt.delta > 0)) throw std::invalid_argument("--delta must be > 0");
  // One floor for every method (analyze/feature_scaling.h); the GMM standardises too, its scores staying
  // densities in the CSV's units.
  if (opt.constant_columns == "floor" && !(opt.floor.absolute > 0))
    throw std::invalid_argument("--constant-columns floor needs --min-scale-abs > 0 (a column constant at 0 has no "
                                "relative floor)");
  cfg.gmm.standardize = true;
  cfg.gmm.floor = cfg.kmeans.floor = cfg.dbscan.floor = cfg.pca.floor = cfg.zscore.floor = cfg.iforest.floor =
      opt.floor;
  if (opt.online) return run_detect_online(opt);

  const NumericTable test = without_columns(read_numeric_csv(opt.input), opt.ignore_columns, opt.input);
  std::optional<NumericTable> train;
  if (!opt.train.empty()) {
    train = without_columns(read_numeric_csv(opt.train), opt.ignore_columns, opt.train);
    if (train->columns != test.columns)
      throw std::invalid_argument(fmt::format("{} and {} have different columns ({})", opt.train, opt.input,
                                              column_difference(train->columns, test.columns)));
  }
  const NumericTable& fit_on = train ? *train : test;
  const std::string fit_name = train ? opt.train : opt.input;
  const Eigen::MatrixXd x_fit = to_matrix(fit_on);
  const Eigen::MatrixXd x_test = train ? to_matrix(test) : x_fit;

  if (opt.constant_columns == "error") require_varying(x_fit, fit_on, fit_name, opt.floor);

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

  OutputFile file(opt.output, {.inputs = {opt.input, opt.train}, .what = "--output"});
  std::ostream& out = file.stream();
  out << "score,anomaly\n";
  size_t anomalies = 0;
  for (Eigen::Index i = 0; i < scores.size(); ++i) {
    const bool a = scores(i) > threshold;
    anomalies += a;
    out << fmt::format("{},{}\n", scores(i), a ? 1 : 0);
  }
  file.commit();

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
                     {"constant_columns", opt.constant_columns},
                     {"scale_floor", {{"relative", opt.floor.relative}, {"absolute", opt.floor.absolute}}},
                     {"model", model_summary(*detector)}};
    std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
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
  cmd->add_option("--constant-columns", opt->constant_columns,
                  "A column constant in the training data: error (the default) | floor (keep it; a row that moves "
                  "it scores as far out as the floor says)")
      ->check(CLI::IsMember({"error", "floor"}));
  cmd->add_option("--min-scale-rel", opt->floor.relative,
                  "Every method: standardise by max(sd, R x |training mean|, --min-scale-abs) (default 0.001)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--min-scale-abs", opt->floor.absolute,
                  "Floor on the standardising scale in the column's own units (default 0.001; for the log10 "
                  "columns of `stackscope features`, 0.01 is a 2.3 % change)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--ignore-columns", opt->ignore_columns, "Columns to leave out, e.g. t0_ns,t1_ns")->delimiter(',');
  cmd->add_flag("--json", opt->json, "Print a JSON summary (rows, anomalies, threshold, model parameters)");
  auto* online = cmd->add_flag("--online", opt->online,
                               "Online mode: rows in time order, each scored by a model of the rows before it, refitted "
                               "every --refit-every on the last --horizon (--train's rows, if given, come first and "
                               "are not written). Output columns: score (empty before the first model), anomaly, model "
                               "(its version, 0: none)");
  cmd->add_option("--time-column", opt->time_column,
                  "--online: the column holding each row's time (nanoseconds when its name ends in _ns, e.g. t0_ns "
                  "of `stackscope features`; else seconds); it is not a feature. Default: rows --row-interval apart")
      ->needs(online);
  cmd->add_option("--row-interval", opt->row_interval_s, "--online without --time-column: seconds between rows (default 1)")
      ->needs(online);
  cmd->add_option("--horizon", opt->horizon_s, "--online: seconds of past rows each fit uses (default 3600)")
      ->needs(online);
  cmd->add_option("--refit-every", opt->refit_every_s, "--online: seconds between refits (default 60)")->needs(online);
  cmd->add_flag("--exclude-flagged", opt->exclude_flagged,
                "--online: rows the model flags stay out of later fits (a fault does not become normal; nor does a "
                "lasting change, which stays flagged until it ends). Default: every row joins the horizon")
      ->needs(online);
  cmd->add_option("--min-train-rows", opt->min_train_rows,
                  "--online: rows the horizon must hold before the first model (default 64)")
      ->check(CLI::PositiveNumber)
      ->needs(online);
  cmd->footer(
      "Scores: gmm -log density under the most likely component (eACGM Algorithm 2); kmeans distance to the\n"
      "nearest centre; iforest 2^(-mean path/c(n)); dbscan distance to the nearest core point / eps; zscore\n"
      "mean (or max) |z|; pca Mahalanobis distance in the PCA subspace. Every method standardises by the\n"
      "training data with a floor on the scale (the variance floor: a feature that hardly moves in training\n"
      "does not turn a small change into thousands of deviations); gmm components are also never narrower\n"
      "than that floor, and its densities stay in the CSV's units. With --constant-columns floor, a column\n"
      "constant in training is kept: moving it scores high and finite (pca gives it an axis of its own,\n"
      "iforest may split it within the floor of its value).\n"
      "Examples:\n"
      "  stackscope detect --method gmm --train normal.csv --input test.csv --output scores.csv --delta 1e-4\n"
      "  stackscope detect --method iforest --input data.csv --output scores.csv --quantile 0.99 --json\n"
      "  stackscope detect --method gmm --train clean.csv --input run.csv --output s.csv --ignore-columns t0_ns,t1_ns \\\n"
      "      --constant-columns floor --min-scale-abs 0.01\n"
      "  stackscope detect --method gmm --online --time-column t0_ns --ignore-columns t1_ns --horizon 600 \\\n"
      "      --refit-every 30 --input cuda.csv --output s.csv\n"
      "Online mode keeps a column that is constant within a horizon at the scale floor (as --constant-columns floor).");
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
