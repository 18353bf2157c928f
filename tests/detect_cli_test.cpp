// `stackscope detect` end to end, and the numeric CSV reader it uses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "store/numeric_csv.h"
#include "test_util.h"

namespace {

// 400 normal rows of 3 features (one column constant) then 4 planted outliers.
std::string planted_csv(unsigned seed = 1, bool with_outliers = true) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> g(0, 1);
  std::ostringstream s;
  s << "latency_us,bytes,flag\n";
  for (int i = 0; i < 400; ++i) s << 5 + 0.2 * g(rng) << "," << 1000 + 50 * g(rng) << ",1\n";
  if (with_outliers) s << "500,1000,1\n80,1020,1\n5,9000,1\n-20,-3000,1\n";
  return s.str();
}

struct ScoresFile {
  std::vector<double> score;
  std::vector<int> anomaly;
};

ScoresFile read_scores(const std::string& path) {
  std::istringstream in(read_file(path));
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "score,anomaly");
  ScoresFile f;
  while (std::getline(in, line)) {
    const auto comma = line.find(',');
    f.score.push_back(std::stod(line.substr(0, comma)));
    f.anomaly.push_back(std::stoi(line.substr(comma + 1)));
  }
  return f;
}

std::string bin() { return STACKSCOPE_BIN; }

}  // namespace

TEST(NumericCsv, ParsesAndNamesDefects) {
  const auto t = stackscope::parse_numeric_csv("a, \"b\"\n1,2.5\r\n-3,+4e2\n\n", "x.csv");
  ASSERT_EQ(t.columns, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(t.rows(), 2u);
  EXPECT_EQ(t.values, (std::vector<double>{1, 2.5, -3, 400}));
  auto error_of = [](const std::string& text) {
    try {
      stackscope::parse_numeric_csv(text, "x.csv");
    } catch (const stackscope::NumericCsvError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error_of(""), "x.csv: empty file (expected a header row of column names)");
  EXPECT_EQ(error_of("a,b\n"), "x.csv: no data rows after the header");
  EXPECT_EQ(error_of("a,b\n1,2\n3,oops\n"), "x.csv:3, column 'b': 'oops' is not a number");
  EXPECT_EQ(error_of("a,b\n1,nan\n"), "x.csv:2, column 'b': 'nan' is not finite");
  EXPECT_EQ(error_of("a,b\ninf,1\n"), "x.csv:2, column 'a': 'inf' is not finite");
  EXPECT_EQ(error_of("a,b\n1\n"), "x.csv:2: 1 cells, the header has 2");
  EXPECT_EQ(error_of("a,b\n1,\n"), "x.csv:2, column 'b': empty cell");
}

TEST(DetectCli, EveryMethodFlagsPlantedRows) {
  TempDir dir;
  write_file(dir.file("in.csv"), planted_csv());
  for (std::string m : {"gmm", "kmeans", "iforest", "dbscan", "zscore", "pca"}) {
    std::string out;
    const std::string cmd = bin() + " detect --method " + m + " --input " + dir.file("in.csv") + " --output " +
                            dir.file(m + ".csv") + " --quantile 0.99 --seed 3 --constant-columns floor --json";
    ASSERT_EQ(run_command(cmd, &out), 0) << m << ": " << out;
    const auto j = nlohmann::json::parse(out);
    EXPECT_EQ(j["rows"], 404);
    EXPECT_EQ(j["method"], m);
    const ScoresFile s = read_scores(dir.file(m + ".csv"));
    ASSERT_EQ(s.score.size(), 404u);
    int flagged = 0;
    for (int a : s.anomaly) flagged += a;
    EXPECT_EQ(j["anomalies"], flagged);
    EXPECT_LE(flagged, 6) << m;
    for (int r = 400; r < 404; ++r) EXPECT_EQ(s.anomaly[static_cast<size_t>(r)], 1) << m << " row " << r;
  }
}

TEST(DetectCli, GmmTrainTestDeltaAndBic) {
  TempDir dir;
  write_file(dir.file("train.csv"), planted_csv(2, false));
  write_file(dir.file("test.csv"), planted_csv(3, true));
  std::string out;
  ASSERT_EQ(run_command(bin() + " detect --method gmm --train " + dir.file("train.csv") + " --input " +
                            dir.file("test.csv") + " --output " + dir.file("s.csv") +
                            " --delta 1e-6 --covariance diag --max-components 4 --ignore-columns flag --json",
                        &out),
            0)
      << out;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["train_rows"], 400);
  EXPECT_EQ(j["model"]["components"], 1);  // one Gaussian blob: BIC picks K = 1
  EXPECT_EQ(j["model"]["bic_by_components"].size(), 4u);
  EXPECT_EQ(j["model"]["covariance"], "diag");
  const ScoresFile s = read_scores(dir.file("s.csv"));
  for (int r = 400; r < 404; ++r) EXPECT_EQ(s.anomaly[static_cast<size_t>(r)], 1) << r;
  EXPECT_NEAR(j["threshold"].get<double>(), -std::log(1e-6), 1e-9);
}

TEST(DetectCli, BadInputIsAClearError) {
  TempDir dir;
  write_file(dir.file("empty.csv"), "");
  write_file(dir.file("text.csv"), "a,b\n1,2\n3,x\n");
  write_file(dir.file("nan.csv"), "a,b\n1,2\nNaN,4\n");
  write_file(dir.file("few.csv"), "a,b\n1,2\n3,4\n");
  write_file(dir.file("other.csv"), "a,c\n1,2\n3,4\n");
  auto run = [&](const std::string& args, std::string* out) {
    return run_command(bin() + " detect " + args + " --output " + dir.file("o.csv"), out);
  };
  std::string out;
  EXPECT_NE(run("--method gmm --input " + dir.file("empty.csv"), &out), 0);
  EXPECT_NE(out.find("empty file"), std::string::npos) << out;
  EXPECT_NE(run("--method zscore --input " + dir.file("text.csv"), &out), 0);
  EXPECT_NE(out.find("text.csv:3, column 'b': 'x' is not a number"), std::string::npos) << out;
  EXPECT_NE(run("--method iforest --input " + dir.file("nan.csv"), &out), 0);
  EXPECT_NE(out.find("nan.csv:3, column 'a'"), std::string::npos) << out;
  EXPECT_NE(run("--method gmm --components 5 --input " + dir.file("few.csv"), &out), 0);
  EXPECT_NE(out.find("fewer than the 5 components"), std::string::npos) << out;
  EXPECT_NE(run("--method pca --train " + dir.file("few.csv") + " --input " + dir.file("other.csv"), &out), 0);
  EXPECT_NE(out.find("different columns"), std::string::npos) << out;
  EXPECT_NE(run("--method kmeans --delta 0.1 --input " + dir.file("few.csv"), &out), 0);
  EXPECT_NE(out.find("--delta"), std::string::npos) << out;
  EXPECT_EQ(out.find("Segmentation"), std::string::npos);
  ASSERT_EQ(run_command(bin() + " detect --help", &out), 0);
  for (const char* opt : {"--method", "--train", "--input", "--output", "--components", "--delta", "--quantile",
                          "--covariance", "--restarts", "--seed", "--trees", "--eps", "--min-points", "--variance",
                          "--json"})
    EXPECT_NE(out.find(opt), std::string::npos) << opt;
}

namespace {

// Training rows where `sync` (a log10 call count) is always 0, as a synchronisation call that never happens in
// the clean period; the test file has 50 normal rows, then 5 rows where it jumps to log10(51).
void write_constant_column_files(const TempDir& dir) {
  std::mt19937 rng(7);
  std::normal_distribution<double> g(0, 1);
  std::ostringstream train, test;
  train << "t0_ns,lat,calls,sync\n";
  test << "t0_ns,lat,calls,sync\n";
  for (int i = 0; i < 300; ++i) train << i << "," << 3 + 0.05 * g(rng) << "," << 2 + 0.02 * g(rng) << ",0\n";
  for (int i = 0; i < 55; ++i)
    test << i << "," << 3 + 0.05 * g(rng) << "," << 2 + 0.02 * g(rng) << "," << (i < 50 ? 0.0 : std::log10(51)) << "\n";
  write_file(dir.file("train.csv"), train.str());
  write_file(dir.file("test.csv"), test.str());
}

}  // namespace

TEST(DetectCli, ConstantTrainingColumnIsAnErrorByDefaultAndScoredWithFloor) {
  TempDir dir;
  write_constant_column_files(dir);
  const std::string files = " --train " + dir.file("train.csv") + " --input " + dir.file("test.csv") +
                            " --ignore-columns t0_ns --output " + dir.file("s.csv");
  std::string out;
  for (std::string m : {"gmm", "kmeans", "iforest", "dbscan", "zscore", "pca"}) {
    EXPECT_NE(run_command(bin() + " detect --method " + m + files, &out), 0) << m;
    EXPECT_NE(out.find("column 'sync' is constant in the training data"), std::string::npos) << m << ": " << out;
    EXPECT_NE(out.find("--constant-columns floor"), std::string::npos) << out;

    ASSERT_EQ(run_command(bin() + " detect --method " + m + files + " --constant-columns floor --quantile 0.99 --json",
                          &out),
              0)
        << m << ": " << out;
    const ScoresFile s = read_scores(dir.file("s.csv"));
    ASSERT_EQ(s.score.size(), 55u);
    double normal_max = -INFINITY;
    for (size_t r = 0; r < 50; ++r) normal_max = std::max(normal_max, s.score[r]);
    for (size_t r = 50; r < 55; ++r) {
      EXPECT_TRUE(std::isfinite(s.score[r])) << m << " row " << r;
      EXPECT_GT(s.score[r], normal_max) << m << " row " << r << ": moving the constant column must stand out";
      EXPECT_EQ(s.anomaly[r], 1) << m << " row " << r;
    }
    int false_alarms = 0;
    for (size_t r = 0; r < 50; ++r) false_alarms += s.anomaly[r];
    EXPECT_LE(false_alarms, 3) << m;
  }
  // Without an absolute floor a column constant at 0 has no scale at all: refused, not NaN.
  EXPECT_NE(run_command(bin() + " detect --method zscore" + files + " --constant-columns floor --min-scale-abs 0", &out),
            0);
  EXPECT_NE(out.find("--min-scale-abs"), std::string::npos) << out;
  EXPECT_NE(run_command(bin() + " detect --method zscore" + files + " --ignore-columns nope", &out), 0);
  EXPECT_NE(out.find("no column 'nope'"), std::string::npos) << out;
}

namespace {

// 600 rows 0.5 s apart of two features; row 400 a spike in `a`; from row 450 on, `b` 10 sigma higher for good.
std::string timed_csv(unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> g(0, 1);
  std::ostringstream s;
  s << "t0_ns,t1_ns,a,b\n";
  for (int i = 0; i < 600; ++i) {
    const double a = i == 400 ? 9.0 : 5 + 0.2 * g(rng);
    const double b = 100 + 3 * g(rng) + (i >= 450 ? 30 : 0);
    s << static_cast<int64_t>(i) * 500'000'000 << "," << static_cast<int64_t>(i + 1) * 500'000'000 << "," << a << ","
      << b << "\n";
  }
  return s.str();
}

struct OnlineRow {
  bool scored;
  int anomaly;
  int model;
};

std::vector<OnlineRow> read_online_scores(const std::string& path) {
  std::istringstream in(read_file(path));
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "score,anomaly,model");
  std::vector<OnlineRow> rows;
  while (std::getline(in, line)) {
    const auto c1 = line.find(','), c2 = line.find(',', c1 + 1);
    OnlineRow r{c1 > 0, std::stoi(line.substr(c1 + 1, c2 - c1 - 1)), std::stoi(line.substr(c2 + 1))};
    if (r.scored) {
      EXPECT_TRUE(std::isfinite(std::stod(line.substr(0, c1)))) << line;
    }
    rows.push_back(r);
  }
  return rows;
}

}  // namespace

// The engine's online scorer through the CLI: each row is scored by a model of the rows before it (none for the
// first 64), refits come every 10 s of row time on the last 60 s, a spike is flagged, a lasting shift is flagged
// when it starts and becomes normal once it fills the horizon; a replay gives the same output every time.
TEST(DetectCli, OnlineScoresEachRowWithAModelOfItsPast) {
  TempDir dir;
  write_file(dir.file("run.csv"), timed_csv(3));
  const std::string base = bin() + " detect --method gmm --online --time-column t0_ns --ignore-columns t1_ns "
                                   "--horizon 60 --refit-every 10 --quantile 0.999 --input " + dir.file("run.csv");
  std::string out;
  ASSERT_EQ(run_command(base + " --json --output " + dir.file("s1.csv"), &out), 0) << out;
  const auto j = nlohmann::json::parse(out.substr(out.find('{')));
  EXPECT_EQ(j["rows"], 600);
  EXPECT_EQ(j["scored_rows"], 600 - 64);
  EXPECT_GE(j["refits"].get<int>(), 25);  // 300 s of rows, one refit per 10 s after the first model
  const auto rows = read_online_scores(dir.file("s1.csv"));
  ASSERT_EQ(rows.size(), 600u);
  for (size_t i = 0; i < 64; ++i) EXPECT_FALSE(rows[i].scored) << i;
  EXPECT_TRUE(rows[64].scored);
  EXPECT_EQ(rows[64].model, 1);
  for (size_t i = 65; i < rows.size(); ++i) EXPECT_GE(rows[i].model, rows[i - 1].model) << i;
  EXPECT_EQ(rows[400].anomaly, 1) << "the spike";
  EXPECT_EQ(rows[450].anomaly, 1) << "the shift's first row";
  int late = 0;  // the last 40 rows: the shift has filled the 60 s horizon
  for (size_t i = 560; i < 600; ++i) late += rows[i].anomaly;
  EXPECT_LE(late, 4);
  ASSERT_EQ(run_command(base + " --output " + dir.file("s2.csv"), &out), 0) << out;
  EXPECT_EQ(read_file(dir.file("s1.csv")), read_file(dir.file("s2.csv")));
  // --exclude-flagged: the shifted rows never join the horizon, so the shift stays flagged to the end.
  ASSERT_EQ(run_command(base + " --exclude-flagged --output " + dir.file("s3.csv"), &out), 0) << out;
  const auto kept_out = read_online_scores(dir.file("s3.csv"));
  int late_kept_out = 0;
  for (size_t i = 560; i < 600; ++i) late_kept_out += kept_out[i].anomaly;
  EXPECT_EQ(late_kept_out, 40);

  // Rows out of time order, and a time column that is not there: clear errors.
  write_file(dir.file("back.csv"), "t_s,a\n0,1\n2,1.1\n1,0.9\n");
  EXPECT_NE(run_command(bin() + " detect --method zscore --online --time-column t_s --input " + dir.file("back.csv") +
                            " --output " + dir.file("o.csv"), &out), 0);
  EXPECT_NE(out.find("back.csv: row 4: time goes backwards"), std::string::npos) << out;
  EXPECT_NE(run_command(bin() + " detect --method gmm --online --time-column when --input " + dir.file("back.csv") +
                            " --output " + dir.file("o.csv"), &out), 0);
  EXPECT_NE(out.find("no column 'when'"), std::string::npos) << out;
  EXPECT_NE(run_command(bin() + " detect --method gmm --horizon 5 --input " + dir.file("back.csv") + " --output " +
                            dir.file("o.csv"), &out), 0);
  EXPECT_NE(out.find("--horizon requires --online"), std::string::npos) << out;
}
