// Hostile input to the offline commands: a wide CSV costs time in proportion to what it holds.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

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
