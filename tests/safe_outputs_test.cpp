// Outputs never destroy data. A second record on a path, a failed import or record, an output that
// names an input, a symlink at the output path: each is refused or leaves the existing file as it was.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "store/output_file.h"
#include "store/recording_writer.h"
#include "test_util.h"

using namespace stackscope;

namespace {

const std::string kBin = STACKSCOPE_BIN;

void write_small_recording(const std::string& path) {
  RecordingWriter w(path);
  w.set_meta("host", "h");
  const SeriesId id =
      w.add_series({0, "cpu.busy", Subsystem::cpu, "ratio", SeriesKind::gauge, SeriesCategory::dynamic, "h", "", "procfs"});
  std::vector<Sample> s;
  for (int i = 0; i < 200; ++i) s.push_back({id, 1'000'000'000LL + i * 10'000'000LL, static_cast<double>(i % 7)});
  w.append_samples(s);
  w.close();
}

// Every entry of the folder but the given names: what a command left behind.
std::vector<std::string> leftovers(const TempDir& dir, const std::vector<std::string>& expected) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    const std::string name = e.path().filename().string();
    if (std::find(expected.begin(), expected.end(), name) == expected.end()) out.push_back(name);
  }
  return out;
}

}  // namespace

TEST(SafeOutputs, RecordRefusesAnExistingFileUnlessForced) {
  TempDir dir;
  const std::string rec = dir.file("a.sdb");
  std::string out;
  ASSERT_EQ(run_command(kBin + " record -q --layers host -o " + rec + " -- sleep 0.5", &out), 0) << out;
  const std::string first = read_file(rec);
  ASSERT_FALSE(first.empty());
  // Before: the second recorder silently wiped the first one's data, both exit 0.
  EXPECT_EQ(run_command(kBin + " record -q --layers host -o " + rec + " -- sleep 0.2", &out), 1) << out;
  EXPECT_NE(out.find("exists"), std::string::npos) << out;
  EXPECT_NE(out.find("--force"), std::string::npos) << out;
  EXPECT_EQ(read_file(rec), first);
  // A failed start with --force leaves it as it was too (before: emptied first).
  EXPECT_EQ(run_command(kBin + " record -q --force --layers host -o " + rec + " -- /nonexistent/prog", &out), 127)
      << out;
  EXPECT_EQ(read_file(rec), first);
  EXPECT_EQ(leftovers(dir, {"a.sdb"}), std::vector<std::string>{});
  // --force replaces it once the new recording ends.
  ASSERT_EQ(run_command(kBin + " record -q --force --layers host -o " + rec + " -- sleep 0.3", &out), 0) << out;
  EXPECT_NE(read_file(rec), first);
  EXPECT_EQ(run_command(kBin + " info " + rec, &out), 0) << out;
  EXPECT_EQ(leftovers(dir, {"a.sdb"}), std::vector<std::string>{});
}

TEST(SafeOutputs, ASecondRecorderRefusesAPathInUse) {
  TempDir dir;
  const std::string rec = dir.file("busy.sdb");
  std::string out;
  const int rc = run_command("(" + kBin + " record -q --layers host -d 3 -o " + rec + " & p=$!; sleep 1; " + kBin +
                                 " record -q --force --layers host -d 1 -o " + rec + "; echo second=$?; wait $p)",
                             &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("second=1"), std::string::npos) << out;
  EXPECT_NE(out.find("in use by another recorder"), std::string::npos) << out;
  EXPECT_EQ(run_command(kBin + " info " + rec, &out), 0) << out;
}

TEST(SafeOutputs, FailedImportLeavesTheExistingFileUntouched) {
  TempDir dir;
  const std::string rec = dir.file("r.sdb");
  write_small_recording(rec);
  const std::string before = read_file(rec);
  write_file(dir.file("bad.csv"), "time,cpu\n");  // fails after the writer started: no data rows
  std::string out;
  EXPECT_NE(run_command(kBin + " import --format csv " + dir.file("bad.csv") + " -o " + rec, &out), 0) << out;
  EXPECT_EQ(read_file(rec), before);
  EXPECT_EQ(leftovers(dir, {"r.sdb", "bad.csv"}), std::vector<std::string>{});
  // A good one replaces it, as --help says.
  write_file(dir.file("good.csv"), "time,cpu\n1,2\n2,3\n3,4\n");
  EXPECT_EQ(run_command(kBin + " import --format csv " + dir.file("good.csv") + " -o " + rec, &out), 0) << out;
  EXPECT_NE(read_file(rec), before);
  EXPECT_EQ(run_command(kBin + " info " + rec, &out), 0) << out;
}

TEST(SafeOutputs, AnOutputThatIsAnInputIsRefused) {
  TempDir dir;
  const std::string rec = dir.file("r.sdb"), rec2 = dir.file("r2.sdb");
  write_small_recording(rec);
  write_small_recording(rec2);
  write_file(dir.file("in.csv"), "time,cpu\n1,2\n2,3\n3,4\n");
  ASSERT_EQ(::link(rec.c_str(), dir.file("hard.sdb").c_str()), 0);  // another name of the same file counts too
  const std::string rec_bytes = read_file(rec), csv_bytes = read_file(dir.file("in.csv"));
  const std::vector<std::string> commands = {
      " import --format csv " + dir.file("in.csv") + " -o " + dir.file("in.csv"),
      " export " + rec + " --format csv -o " + rec,
      " export " + rec + " --format chrome-json -o " + dir.file("hard.sdb"),
      " features " + rec + " --layer host -o " + rec,
      " stragglers " + rec + " " + rec2 + " --html " + rec,
      " detect --method zscore --input " + dir.file("in.csv") + " --output " + dir.file("in.csv"),
      " report " + rec + " -o " + rec,
      " report " + rec2 + " " + rec + " -o " + dir.file("hard.sdb"),
  };
  for (const std::string& c : commands) {
    std::string out;
    EXPECT_EQ(run_command(kBin + c, &out), 1) << c << "\n" << out;
    EXPECT_NE(out.find("also an input"), std::string::npos) << c << "\n" << out;
    EXPECT_EQ(read_file(rec), rec_bytes) << c;
    EXPECT_EQ(read_file(dir.file("in.csv")), csv_bytes) << c;
  }
}

TEST(SafeOutputs, ASymlinkAtTheOutputPathIsNeverFollowed) {
  TempDir dir;
  const std::string rec = dir.file("r.sdb"), rec2 = dir.file("r2.sdb"), victim = dir.file("victim.txt");
  write_small_recording(rec);
  write_small_recording(rec2);
  write_file(victim, "precious\n");
  write_file(dir.file("in.csv"), "a,b\n1,2\n2,3\n3,4\n4,5\n");
  const std::string link = dir.file("out");
  ASSERT_EQ(::symlink(victim.c_str(), link.c_str()), 0);
  const std::vector<std::string> commands = {
      " export " + rec + " --format csv -o " + link,
      " features " + rec + " --layer host -o " + link,
      " detect --method zscore --input " + dir.file("in.csv") + " --output " + link,
      " stragglers " + rec + " " + rec2 + " --html " + link,
      " import --format csv " + dir.file("in.csv") + " -o " + link,
      " record -q --force --layers host -o " + link + " -- true",
      " report " + rec + " -o " + link,
  };
  for (const std::string& c : commands) {
    std::string out;
    EXPECT_NE(run_command(kBin + c, &out), 0) << c << "\n" << out;
    EXPECT_NE(out.find("symbolic link"), std::string::npos) << c << "\n" << out;
    EXPECT_EQ(read_file(victim), "precious\n") << c;
  }
}

TEST(SafeOutputs, OutputFileWritesBesideAndRenamesOnCommit) {
  TempDir dir;
  const std::string path = dir.file("o.txt");
  write_file(path, "old\n");
  {
    OutputFile f(path);
    f.stream() << "new\n";
    EXPECT_EQ(read_file(path), "old\n");  // untouched until commit
    EXPECT_NE(f.write_path(), path);
    f.commit();
  }
  EXPECT_EQ(read_file(path), "new\n");
  {
    OutputFile f(path);
    f.stream() << "half";
    // no commit: a failure half-way
  }
  EXPECT_EQ(read_file(path), "new\n");
  EXPECT_EQ(leftovers(dir, {"o.txt"}), std::vector<std::string>{});
  EXPECT_THROW(OutputFile(path, {.inputs = {}, .replace = false}), std::invalid_argument);
  EXPECT_THROW(OutputFile(dir.path()), std::invalid_argument);  // a directory
  // A recording's mode: 0600 whatever the umask.
  {
    OutputFile f(dir.file("p.sdb"), {.inputs = {}, .mode = 0600, .in_place_when_new = true, .sqlite = true});
    RecordingWriter w(f.write_path());
    w.close();
    f.commit();
  }
  struct stat st{};
  ASSERT_EQ(::stat(dir.file("p.sdb").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

// --detect-log is appended to. A record that cannot start its command leaves an existing log as it was (it was
// emptied) and creates none; a log named like the recording is refused; one the record creates is 0600; one that
// runs keeps what the log held.
TEST(SafeOutputs, ADetectLogIsAppendedNeverEmptied) {
  TempDir dir;
  const std::string log = dir.file("log.txt"), rec = dir.file("r.sdb");
  const std::string earlier = "{\"id\": 4, \"online\": \"close\", \"summary\": \"an earlier run's\"}\n";
  write_file(log, earlier);
  std::string out;
  EXPECT_EQ(run_command(kBin + " record -q --detect --detect-log " + log + " --layers host -o " + rec +
                            " -- /nonexistent/prog",
                        &out),
            127)
      << out;
  EXPECT_EQ(read_file(log), earlier);
  EXPECT_EQ(run_command(kBin + " record -q --detect --detect-log " + dir.file("new.jsonl") + " --layers host -o " +
                            rec + " -- /nonexistent/prog",
                        &out),
            127)
      << out;
  EXPECT_EQ(leftovers(dir, {"log.txt"}), std::vector<std::string>{});
  EXPECT_EQ(run_command(kBin + " record -q --detect --detect-log " + rec + " --layers host -o " + rec + " -- true", &out),
            1)
      << out;
  EXPECT_NE(out.find("also an input"), std::string::npos) << out;
  EXPECT_EQ(leftovers(dir, {"log.txt"}), std::vector<std::string>{});

  ASSERT_EQ(run_command(kBin + " record -q --detect --detect-log " + log + " --layers host -o " + rec + " -- sleep 0.3",
                        &out),
            0)
      << out;
  EXPECT_EQ(read_file(log).substr(0, earlier.size()), earlier);
  ASSERT_EQ(run_command(kBin + " record -q --force --detect --detect-log " + dir.file("new.jsonl") +
                            " --layers host -o " + rec + " -- true",
                        &out),
            0)
      << out;
  struct stat st{};
  ASSERT_EQ(::stat(dir.file("new.jsonl").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}
