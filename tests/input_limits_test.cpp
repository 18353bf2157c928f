// Hostile input to the offline commands: a wide or huge CSV costs memory and time in proportion to what it
// holds, a message quotes only an excerpt of the input, a wide table fits a diagonal mixture without d x d
// matrices, and a recorded command line keeps no secret in clear.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <random>

#include "analyze/detectors/em_fitter.h"
#include "store/bounded_csv.h"
#include "store/command_redaction.h"
#include "store/numeric_csv.h"
#include "store/series_csv.h"
#include "test_util.h"

using namespace stackscope;

namespace {

const std::string kBin = STACKSCOPE_BIN;

struct Measured {
  int rc = -1;
  std::string out;
  long max_rss_mb = 0;  // the command's peak resident memory
  double seconds = 0;
};

// Runs `cmd` through sh with its output captured and measures its peak memory. A plain fork: the child starts
// with this process's current memory (small), not its high-water mark, as a spawn sharing it would.
Measured run_measured(const TempDir& dir, const std::string& cmd) {
  Measured m;
  const std::string out_path = dir.file("measured.out");
  const std::string full = cmd + " >" + out_path + " 2>&1";  // built before the fork: the child only execs
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", full.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  rusage ru{};
  if (pid > 0 && ::wait4(pid, &status, 0, &ru) == pid) {
    m.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    m.max_rss_mb = ru.ru_maxrss / 1024;
  }
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  m.out = read_file(out_path);
  return m;
}

// A file of `prefix`, then `bytes` digits, then `suffix`, written in pieces (this process stays small).
void write_with_long_field(const std::string& path, const std::string& prefix, size_t bytes,
                           const std::string& suffix) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fputs(prefix.c_str(), f);
  const std::string chunk(size_t{1} << 20, '7');
  for (size_t left = bytes; left > 0;) {
    const size_t n = std::min(left, chunk.size());
    std::fwrite(chunk.data(), 1, n, f);
    left -= n;
  }
  std::fputs(suffix.c_str(), f);
  std::fclose(f);
}

// A series table: a time column and `columns` value columns named c1, c2, ..., `rows` rows.
std::string wide_series_csv(size_t columns, size_t rows, const std::string& last_name = "") {
  std::string s = "time";
  for (size_t c = 1; c <= columns; ++c) s += ",c" + std::to_string(c);
  if (!last_name.empty()) s += "," + last_name;
  s += "\n";
  const size_t fields = columns + (last_name.empty() ? 0 : 1);
  for (size_t r = 0; r < rows; ++r) {
    s += std::to_string(1700000000 + r);
    for (size_t c = 0; c < fields; ++c) s += (c + r) % 3 ? ",1" : ",2.5";
    s += "\n";
  }
  return s;
}

}  // namespace

TEST(InputLimits, ImportOfTwoHundredThousandColumnsIsLinear) {
  // A duplicate-name check over every pair of columns takes about a minute here; a linear one, a second.
  TempDir dir;
  write_file(dir.file("wide.csv"), wide_series_csv(200'000, 3));
  const Measured ok = run_measured(dir, kBin + " import --format csv " + dir.file("wide.csv") + " -o " +
                                            dir.file("wide.sdb") + " -q");
  ASSERT_EQ(ok.rc, 0) << ok.out;
  EXPECT_LT(ok.seconds, 20) << "200k columns";
  // A duplicate name, however far in, is still refused with the name and both positions shown.
  write_file(dir.file("dup.csv"), wide_series_csv(200'000, 1, "c7"));
  const Measured dup = run_measured(dir, kBin + " import --format csv " + dir.file("dup.csv") + " -o " +
                                             dir.file("dup.sdb") + " -q");
  EXPECT_EQ(dup.rc, 1) << dup.out;
  EXPECT_NE(dup.out.find("column name 'c7' appears twice (columns 8 and 200002)"), std::string::npos) << dup.out;
  EXPECT_LT(dup.seconds, 20);
  EXPECT_FALSE(std::filesystem::exists(dir.file("dup.sdb")));
}

TEST(InputLimits, TooManyColumnsAreRefusedNamingTheLimit) {
  TempDir dir;
  std::string header = "time";
  header.reserve(kMaxCsvColumns * 2 + 16);
  for (size_t c = 0; c < kMaxCsvColumns; ++c) header += ",";  // a million empty names: no memory per column
  write_file(dir.file("many.csv"), header + "\n1" + std::string(kMaxCsvColumns, ',') + "\n");
  try {
    read_series_csv(dir.file("many.csv"));
    FAIL() << "a million and one columns accepted";
  } catch (const SeriesCsvError& e) {
    EXPECT_NE(std::string(e.what()).find("the header has 1000001 columns, more than the limit of 1000000"),
              std::string::npos)
        << e.what();
  }
}

TEST(InputLimits, AHugeFieldIsRefusedAtItsBoundWithAShortMessage) {
  // Read whole, a 100 MB field costs 400+ MB and fills the error; cut at 64 KiB, it costs nothing.
  TempDir dir;
  constexpr size_t kField = size_t{100} << 20;
  struct Case {
    const char* what;
    std::string prefix;
    std::string command;
  };
  const std::string f = dir.file("big.csv");
  const std::vector<Case> cases{
      {"import", "time,a\n1,", kBin + " import --format csv " + f + " -o " + dir.file("o.sdb") + " -q"},
      {"import header", "time,", kBin + " import --format csv " + f + " -o " + dir.file("o.sdb") + " -q"},
      {"detect", "a,b\n1,", kBin + " detect --method zscore --input " + f + " --output " + dir.file("s.csv")},
      {"stragglers", "worker,step,time\n0,1,2\n1,", kBin + " stragglers " + f},
  };
  for (const Case& c : cases) {
    write_with_long_field(f, c.prefix, kField, "\n");
    const Measured m = run_measured(dir, c.command);
    EXPECT_NE(m.rc, 0) << c.what << ": " << m.out;
    EXPECT_NE(m.out.find("longer than 65536 bytes (it starts '7777"), std::string::npos) << c.what << ": " << m.out;
    EXPECT_LT(m.out.size(), 1000u) << c.what;
    EXPECT_LT(m.max_rss_mb, 100) << c.what;
    std::filesystem::remove(f);
  }
}

TEST(InputLimits, MessagesQuoteAnExcerptOfABadCell) {
  const std::string cell(5000, 'x');
  try {
    parse_numeric_csv("a,b\n1," + cell + "\n", "x.csv");
    FAIL() << "accepted";
  } catch (const NumericCsvError& e) {
    EXPECT_EQ(std::string(e.what()), "x.csv:2, column 'b': '" + std::string(80, 'x') + "...' (5000 bytes) is not a number");
  }
  TempDir dir;
  write_file(dir.file("s.csv"), "time," + cell + "\n1,oops\n");
  try {
    read_series_csv(dir.file("s.csv"));
    FAIL() << "accepted";
  } catch (const SeriesCsvError& e) {
    EXPECT_LT(std::string(e.what()).size(), 300u) << e.what();
    EXPECT_NE(std::string(e.what()).find("...' (5000 bytes): 'oops' is not a number"), std::string::npos) << e.what();
  }
  // A character is never cut in two, control bytes never reach the terminal.
  EXPECT_EQ(quote_excerpt(std::string(79, 'a') + "\xC3\xA9" + "b", 80), "'" + std::string(79, 'a') + "...' (82 bytes)");
  EXPECT_EQ(quote_excerpt("a\x1b[31mb"), "'a?[31mb'");
}

TEST(InputLimits, WideDiagonalGmmNeedsNoSquareMatrix) {
  // A d x d matrix of 10,000 columns is 800 MB; the diagonal model's data is 16 MB.
  TempDir dir;
  constexpr int kCols = 10'000, kRows = 200;
  {
    std::mt19937 rng(7);
    std::normal_distribution<double> n01(0, 1);
    std::string csv;
    for (int c = 0; c < kCols; ++c) csv += (c ? ",c" : "c") + std::to_string(c);
    csv += "\n";
    char buf[32];
    for (int r = 0; r < kRows; ++r) {
      for (int c = 0; c < kCols; ++c) {
        std::snprintf(buf, sizeof buf, c ? ",%.3f" : "%.3f", n01(rng));
        csv += buf;
      }
      csv += "\n";
    }
    write_file(dir.file("wide.csv"), csv);
  }
  const Measured diag = run_measured(dir, kBin + " detect --method gmm --covariance diag --components 2 --input " +
                                              dir.file("wide.csv") + " --output " + dir.file("s.csv"));
  ASSERT_EQ(diag.rc, 0) << diag.out;
  EXPECT_LT(diag.max_rss_mb, 400) << "200 x 10,000 doubles are 16 MB";
  // A full covariance is refused in a short message: the counts and the first few columns, not all 10,000.
  const Measured full = run_measured(dir, kBin + " detect --method gmm --covariance full --components 1 --input " +
                                              dir.file("wide.csv") + " --output " + dir.file("f.csv"));
  EXPECT_EQ(full.rc, 1) << full.out.substr(0, 2000);
  EXPECT_NE(full.out.find("200 rows for 10000 columns"), std::string::npos) << full.out.substr(0, 2000);
  EXPECT_NE(full.out.find("and 9992 more"), std::string::npos) << full.out.substr(0, 2000);
  EXPECT_LT(full.out.size(), 1000u);
}

TEST(InputLimits, DiagonalEmIterationIsTheTextbookUpdate) {
  // The one-pass EM iteration gives what an E-step then an M-step over all rows give, for a diagonal covariance.
  std::mt19937 rng(11);
  std::normal_distribution<double> n01(0, 1);
  Eigen::MatrixXd x(600, 5);
  for (Eigen::Index i = 0; i < x.rows(); ++i)
    for (Eigen::Index c = 0; c < x.cols(); ++c) x(i, c) = n01(rng) + (i % 3 == 0 ? 4.0 * (c % 2) : 0.0);
  const analyze::EmFitter fitter({.components = 3,
                                  .covariance = analyze::CovarianceType::diagonal,
                                  .max_iterations = 1,
                                  .tolerance = 0});
  const analyze::GaussianMixture start = fitter.initial_model(x, 5);
  const analyze::GaussianMixture one_pass = fitter.run(x, start).model;
  Eigen::MatrixXd resp;
  analyze::EmFitter::expect(start, x, resp);
  const analyze::GaussianMixture textbook = fitter.maximize(x, resp);
  EXPECT_TRUE(one_pass.weights().isApprox(textbook.weights(), 1e-10));
  EXPECT_TRUE(one_pass.means().isApprox(textbook.means(), 1e-10));
  for (Eigen::Index c = 0; c < 3; ++c) {
    EXPECT_EQ(one_pass.covariances()[static_cast<size_t>(c)].cols(), 1);
    EXPECT_TRUE(one_pass.variances(c).isApprox(textbook.variances(c), 1e-10)) << c;
  }
}

TEST(InputLimits, SecretsInCommandLinesAreRedacted) {
  struct Case {
    std::vector<std::string> in, want;
  };
  const std::vector<Case> cases{
      // Headers, an authentication scheme kept.
      {{"curl", "-H", "Authorization: Bearer abc.def", "https://x"},
       {"curl", "-H", "Authorization: Bearer ***", "https://x"}},
      {{"curl", "--header=X-Api-Key: k3y", "-H", "Cookie: a=1; b=2"},
       {"curl", "--header=X-Api-Key: ***", "-H", "Cookie: ***"}},
      {{"python3", "t.py", "TOKEN: abc"}, {"python3", "t.py", "TOKEN: ***"}},
      {{"python3", "t.py", "--msg", "sent with bearer abc123 ok"}, {"python3", "t.py", "--msg", "sent with bearer *** ok"}},
      // Long options of a secret-looking name, the value after '=' or next.
      {{"app", "--pass", "p1", "--passwd=p2", "--pw", "p3", "--db-pwd", "p4", "--secret-file", "/s"},
       {"app", "--pass", "***", "--passwd=***", "--pw", "***", "--db-pwd", "***", "--secret-file", "***"}},
      {{"app", "--api-key", "k", "--auth-header=h", "--credentials", "c", "--token-file=/t"},
       {"app", "--api-key", "***", "--auth-header=***", "--credentials", "***", "--token-file=***"}},
      // Environment-style and URL userinfo.
      {{"env", "FOO_TOKEN=x", "AWS_SECRET_ACCESS_KEY=y", "DB_PASS=z", "git", "clone", "https://u:pw@h/r"},
       {"env", "FOO_TOKEN=***", "AWS_SECRET_ACCESS_KEY=***", "DB_PASS=***", "git", "clone", "https://u:***@h/r"}},
      // Short options of known clients only.
      {{"mysql", "-u", "root", "-pS3cret", "-p", "dbname"}, {"mysql", "-u", "root", "-p***", "-p", "dbname"}},
      {{"/usr/bin/sshpass", "-p", "pw", "ssh", "h"}, {"/usr/bin/sshpass", "-p", "***", "ssh", "h"}},
      {{"redis-cli", "-h", "r", "-a", "pw"}, {"redis-cli", "-h", "r", "-a", "***"}},
      {{"openssl", "enc", "-k", "pw", "-passin", "pass:x"}, {"openssl", "enc", "-k", "***", "-passin", "***"}},
      {{"curl", "-u", "bob:pw", "--user=al:pw2", "-ubo:pw3"}, {"curl", "-u", "bob:***", "--user=al:***", "-ubo:***"}},
      {{"timeout", "9", "mongosh", "-p", "pw"}, {"timeout", "9", "mongosh", "-p", "***"}},
      // A shell command in one argument, word by word, quotes kept.
      {{"sh", "-c", "mysql -pS3cret db && curl -H 'Authorization: Basic dXNlcg==' --token t0k x"},
       {"sh", "-c", "mysql -p*** db && curl -H 'Authorization: Basic ***' --token *** x"}},
      // Not secrets: another program's -p, -k and -P, names that only hold a secret word's letters.
      {{"python3", "train.py", "--lr", "0.1", "-k", "5", "-p", "8080", "-P", "4", "--passes", "3", "--upward", "1"},
       {"python3", "train.py", "--lr", "0.1", "-k", "5", "-p", "8080", "-P", "4", "--passes", "3", "--upward", "1"}},
      {{"curl", "-k", "-u", "bob", "https://h/x?a=1"}, {"curl", "-k", "-u", "bob", "https://h/x?a=1"}},
      {{"python3", "-c", "print('time: 12:30')"}, {"python3", "-c", "print('time: 12:30')"}},
  };
  for (const Case& c : cases) EXPECT_EQ(redact_command_line(c.in), c.want) << ::testing::PrintToString(c.in);
}

TEST(InputLimits, RecordStoresTheCommandLineRedacted) {
  TempDir dir;
  const std::string rec = dir.file("p.sdb");
  std::string out;
  // sh runs the script; the other arguments are the script's $0, $1...: stored, never used.
  ASSERT_EQ(run_command(kBin + " record -q --layers host -o " + rec +
                            " -- sh -c 'sleep 0.2' mysql -pS3cretA -H 'Authorization: Bearer S3cretB' "
                            "--pass S3cretC 'TOKEN: S3cretD' MY_API_TOKEN=S3cretE --lr 0.1",
                        &out),
            0)
      << out;
  ASSERT_EQ(run_command(kBin + " info --json " + rec + " 2>/dev/null", &out), 0) << out;
  const std::string command = nlohmann::json::parse(out)["meta"]["command"].get<std::string>();
  EXPECT_EQ(command.find("S3cret"), std::string::npos) << command;
  for (const char* kept : {"-p***", "Authorization: Bearer ***", "--pass ***", "TOKEN: ***", "MY_API_TOKEN=***",
                           "--lr 0.1"})
    EXPECT_NE(command.find(kept), std::string::npos) << kept << " in " << command;
}
