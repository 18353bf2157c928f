// Recordings are self-contained (the .sdb alone reads after kill -9), open read-only, say what they
// dropped, stay private, and the record flags mean what they say; JSON outputs survive any bytes.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "store/command_redaction.h"
#include "store/kineto_trace_reader.h"
#include "store/recording_reader.h"
#include "store/recording_writer.h"
#include "test_util.h"

using namespace stackscope;

namespace {

const std::string kBin = STACKSCOPE_BIN;

nlohmann::json info_json(const std::string& path, int* rc = nullptr) {
  std::string out;
  const int status = run_command(kBin + " info --json " + path + " 2>/dev/null", &out);
  if (rc) *rc = status;
  return nlohmann::json::parse(out, nullptr, false);
}

// A read-only bind mount of `dir` at `at` (a read-only file system, as a user with no write permission sees).
struct ReadOnlyView {
  ReadOnlyView(const std::string& dir, const std::string& at) : at_(at) {
    std::filesystem::create_directories(at);
    ok = ::mount(dir.c_str(), at.c_str(), nullptr, MS_BIND, nullptr) == 0 &&
         ::mount(nullptr, at.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) == 0;
  }
  ~ReadOnlyView() { ::umount2(at_.c_str(), MNT_DETACH); }
  bool ok = false;
  std::string at_;
};

}  // namespace

TEST(SelfContained, TheSdbAloneReadsAfterKillNine) {
  TempDir dir;
  const std::string rec = dir.file("k.sdb");
  std::string out;
  // Before: the schema and every batch lived only in k.sdb-wal; a copy of k.sdb alone was "not a stackscope
  // recording". Now the writer folds the WAL into the file every 2 s.
  const int rc =
      run_command("(" + kBin + " record -q --layers host -o " + rec + " & p=$!; sleep 4.5; kill -KILL $p; wait $p)", &out);
  ASSERT_EQ(rc, 128 + 9) << out;
  ASSERT_TRUE(std::filesystem::exists(rec + "-wal"));
  std::filesystem::copy_file(rec, dir.file("copy.sdb"));  // the .sdb alone
  int status = 0;
  const auto j = info_json(dir.file("copy.sdb"), &status);
  ASSERT_EQ(status, 0);
  EXPECT_GT(j["samples"].get<int>(), 500);
  EXPECT_GT(j["duration_s"].get<double>(), 1.5);  // all but the last ~2 s of 4.5
  // The original with its -wal reads everything, and reading it folds the WAL in.
  const auto full = info_json(rec);
  EXPECT_GE(full["samples"].get<int>(), j["samples"].get<int>());
}

TEST(ReadOnly, EveryReadingCommandWorksOnAReadOnlyFolder) {
  STACKSCOPE_REQUIRE(::geteuid() == 0, "needs root to bind-mount read-only");
  TempDir dir;
  std::filesystem::create_directories(dir.file("data"));
  const std::string rec = dir.file("data/r.sdb");
  std::string out;
  ASSERT_EQ(run_command(kBin + " record -q --layers host -o " + rec + " -- sleep 2", &out), 0) << out;
  // A second one killed (-wal and -shm beside it), as a recorder on a node that died.
  run_command("(" + kBin + " record -q --layers host -o " + dir.file("data/k.sdb") +
              " & p=$!; sleep 1; kill -KILL $p; wait $p)");
  ReadOnlyView view(dir.file("data"), dir.file("ro"));
  ASSERT_TRUE(view.ok);
  const std::string ro = dir.file("ro/r.sdb");
  // Before: "attempt to write a readonly database".
  EXPECT_EQ(run_command(kBin + " info " + ro, &out), 0) << out;
  EXPECT_NE(out.find("read-only"), std::string::npos) << out;
  EXPECT_EQ(run_command(kBin + " analyze " + ro + " -q", &out), 0) << out;
  EXPECT_EQ(run_command(kBin + " analyze " + ro + " --detector reveal -q", &out), 0) << out;
  EXPECT_EQ(run_command(kBin + " export " + ro + " --format csv --what samples -q -o " + dir.file("s.csv"), &out), 0)
      << out;
  EXPECT_GT(read_file(dir.file("s.csv")).size(), 100u);
  EXPECT_EQ(run_command(kBin + " features " + ro + " --layer host -o " + dir.file("f.csv"), &out), 0) << out;
  // The killed one: read, and info says whether its -wal could be read.
  int status = 0;
  const auto j = info_json(dir.file("ro/k.sdb"), &status);
  EXPECT_EQ(status, 0);
  EXPECT_TRUE(j.contains("open_note")) << j.dump();
}

TEST(ReadOnly, AUserWhoMayOnlyReadAnalysesTheRecording) {
  STACKSCOPE_REQUIRE(::geteuid() == 0, "needs root to drop to another user");
  STACKSCOPE_REQUIRE(run_command("command -v setpriv") == 0, "setpriv (util-linux) missing");
  TempDir dir;
  ::chmod(dir.path().c_str(), 0755);  // the user may list and read, not write
  const std::string rec = dir.file("r.sdb");
  std::string out;
  ASSERT_EQ(run_command(kBin + " record -q --layers host --mode 0644 -o " + rec + " -- sleep 1.5", &out), 0) << out;
  const std::string as_nobody = "setpriv --reuid=65534 --regid=65534 --clear-groups ";
  EXPECT_EQ(run_command(as_nobody + kBin + " info " + rec, &out), 0) << out;
  EXPECT_EQ(run_command(as_nobody + kBin + " analyze " + rec + " -q", &out), 0) << out;
  EXPECT_EQ(run_command(as_nobody + kBin + " export " + rec + " --format chrome-json -q -o /dev/null", &out), 0)
      << out;  // a character device is written as it is (never replaced, never removed)
  EXPECT_TRUE(std::filesystem::is_character_file("/dev/null"));
}

TEST(Privacy, RecordingsArePrivateAndSecretsRedacted) {
  TempDir dir;
  const std::string rec = dir.file("p.sdb");
  std::string out;
  ASSERT_EQ(run_command(kBin + " record -q --layers host -o " + rec +
                            " -- sh -c 'sleep 0.3' --token=abc123 --password hunter2 API_KEY=k3y "
                            "https://bob:pw0rd@example.com/x --lr 0.1",
                        &out),
            0)
      << out;
  struct stat st{};
  ASSERT_EQ(::stat(rec.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);  // before: 0644
  const std::string command = info_json(rec)["meta"]["command"].get<std::string>();
  for (const char* secret : {"abc123", "hunter2", "k3y", "pw0rd"})
    EXPECT_EQ(command.find(secret), std::string::npos) << command;
  EXPECT_NE(command.find("--token=***"), std::string::npos) << command;
  EXPECT_NE(command.find("--lr 0.1"), std::string::npos) << command;  // not a secret
  EXPECT_NE(command.find("bob:***@example.com"), std::string::npos) << command;
  // --keep-cmdline keeps them; --mode shares with the group.
  ASSERT_EQ(run_command(kBin + " record -q --keep-cmdline --mode 0640 --layers host -o " + dir.file("k.sdb") +
                            " -- sh -c 'sleep 0.2' --token=abc123",
                        &out),
            0)
      << out;
  EXPECT_NE(info_json(dir.file("k.sdb"))["meta"]["command"].get<std::string>().find("--token=abc123"),
            std::string::npos);
  ASSERT_EQ(::stat(dir.file("k.sdb").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  EXPECT_NE(run_command(kBin + " record -q --mode 0666 --layers host -o " + dir.file("w.sdb") + " -- true", &out), 0);
}

TEST(Privacy, RedactionRule) {
  const std::vector<std::string> in{"python3", "train.py", "--auth-token", "t0k", "-p", "secret!", "--keyfile=/k",
                                    "DB_PASSWORD=x", "--epochs=3", "x=1"};
  const std::vector<std::string> want{"python3", "train.py", "--auth-token", "***", "-p", "secret!", "--keyfile=***",
                                      "DB_PASSWORD=***", "--epochs=3", "x=1"};
  EXPECT_EQ(redact_command_line(in), want);
}

TEST(RecordFlags, DuplicateLayersAllCombinedAndOutOfRangeNumbers) {
  TempDir dir;
  std::string out;
  // --layers host,host: each sample once (before: every sample twice).
  ASSERT_EQ(run_command(kBin + " record -q --layers host -o " + dir.file("a.sdb") + " -- sleep 1", &out), 0) << out;
  ASSERT_EQ(run_command(kBin + " record -q --layers host,host -o " + dir.file("b.sdb") + " -- sleep 1", &out), 0)
      << out;
  const auto a = info_json(dir.file("a.sdb")), b = info_json(dir.file("b.sdb"));
  EXPECT_NEAR(a["series"].get<double>(), b["series"].get<double>(), 5);  // processes come and go
  EXPECT_LT(b["samples"].get<double>(), 1.5 * a["samples"].get<double>());
  // all combines with others (before: refused).
  EXPECT_EQ(run_command(kBin + " record -q --layers all,host -o " + dir.file("c.sdb") + " -- true", &out), 0) << out;
  // Refused with a clear error: --pid 0 and -1 (before: accepted), --duration 1e10 (before: stopped at once).
  for (const std::string bad : {"--pid 0", "--pid -1", "--duration 1e10"}) {
    EXPECT_NE(run_command(kBin + " record -q --layers host " + bad + " -o " + dir.file("d.sdb"), &out), 0) << bad;
    EXPECT_FALSE(std::filesystem::exists(dir.file("d.sdb"))) << bad;
  }
  EXPECT_NE(out.find("--duration"), std::string::npos) << out;
}

TEST(DiskFull, RecordWithACommandExitsThreeAndInfoShowsTheDrops) {
  STACKSCOPE_REQUIRE(::geteuid() == 0, "needs root to mount a tmpfs");
  TempDir dir;
  ASSERT_EQ(::mount("tmpfs", dir.path().c_str(), "tmpfs", 0, "size=2m"), 0);
  const std::string rec = dir.file("full.sdb");
  std::string out;
  // Before: the job's status (0), and info showed "dropped 0".
  // The disk fills 1.5 s in (a filler file takes what is left), however slowly a loaded host samples.
  const int rc = run_command("sh -c '" + kBin + " record -q --layers host --interval 5 -o " + rec +
                                 " -- sleep 6 & sleep 1.5; dd if=/dev/zero of=" + dir.file("filler") +
                                 " bs=4k >/dev/null 2>&1; wait $!'",
                             &out);
  EXPECT_EQ(rc, 3) << out;
  EXPECT_NE(out.find("the command exited with status 0"), std::string::npos) << out;
  RecordingReader r(rec);
  uint64_t dropped = 0;
  for (const auto& [source, n] : r.summary().drops) dropped += n;
  EXPECT_GT(dropped, 0u);
  EXPECT_FALSE(r.meta_or("write_error").empty());
  // And `info` shows them (before: "dropped 0").
  uint64_t shown = 0;
  const auto info = info_json(rec);
  for (const auto& item : info["drops"].items()) shown += item.value().get<uint64_t>();
  EXPECT_EQ(shown, dropped);
  // The .sdb alone (copied without any -wal) holds everything committed before the disk filled.
  TempDir elsewhere;
  std::filesystem::copy_file(rec, elsewhere.file("alone.sdb"));
  const auto alone = info_json(elsewhere.file("alone.sdb"));
  EXPECT_GT(info["samples"].get<int64_t>(), 0);
  EXPECT_EQ(alone["samples"], info["samples"]);
  ::umount2(dir.path().c_str(), MNT_DETACH);
}

TEST(JsonOutput, InvalidUtf8IsReplacedNotAFailure) {
  TempDir dir;
  write_file(dir.file("in.csv"), "time,cpu\xff\xfe busy\n1,2\n2,3\n3,4\n");
  std::string out;
  ASSERT_EQ(run_command(kBin + " import --format csv " + dir.file("in.csv") + " -o " + dir.file("r.sdb"), &out), 0)
      << out;
  ASSERT_EQ(run_command(kBin + " info --json " + dir.file("r.sdb") + " 2>/dev/null", &out), 0) << out;
  EXPECT_FALSE(nlohmann::json::parse(out, nullptr, false).is_discarded()) << out;
  // The command line too.
  ASSERT_EQ(run_command(kBin + " record -q --layers host -o " + dir.file("c.sdb") + " -- sh -c 'sleep 0.2' \"$(printf '\\377')\"",
                        &out),
            0)
      << out;
  ASSERT_EQ(run_command(kBin + " info --json " + dir.file("c.sdb") + " 2>/dev/null", &out), 0) << out;
  EXPECT_FALSE(nlohmann::json::parse(out, nullptr, false).is_discarded()) << out;
  // Other --json outputs: features over the imported recording, stragglers over workers named in bad bytes.
  ASSERT_EQ(run_command(kBin + " features --json " + dir.file("r.sdb") + " --layer host --window 1 -o " +
                            dir.file("f.csv") + " 2>/dev/null",
                        &out),
            0)
      << out;
  EXPECT_FALSE(nlohmann::json::parse(out, nullptr, false).is_discarded()) << out;
  std::string table = "worker,step,time\n";
  for (int step = 1; step <= 40; ++step)
    for (const char* w : {"a\xff", "b\xc3(", "c"})
      table += std::string(w) + "," + std::to_string(step) + "," + (w[0] == 'c' && step > 20 ? "30" : "10") + "\n";
  write_file(dir.file("steps.csv"), table);
  ASSERT_EQ(run_command(kBin + " stragglers --json " + dir.file("steps.csv") + " 2>/dev/null", &out), 0) << out;
  EXPECT_FALSE(nlohmann::json::parse(out, nullptr, false).is_discarded()) << out;
}

TEST(Inflate, ADecompressionBombIsRefused) {
  TempDir dir;
  // 80 MiB of spaces inside a JSON string: gzip makes it about 80 KB (1000 times smaller).
  const std::string json = dir.file("bomb.json");
  ASSERT_EQ(run_command("(printf '{\"traceEvents\":[], \"x\":\"'; head -c 83886080 /dev/zero | tr '\\0' ' '; "
                        "printf '\"}') | gzip -1 > " + json + ".gz"),
            0);
  try {
    read_maybe_compressed(json + ".gz");
    FAIL() << "inflated a 1000:1 bomb";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("decompression bomb"), std::string::npos) << e.what();
  }
  // An honest one still reads.
  ASSERT_EQ(run_command("printf '{\"traceEvents\":[]}' | gzip > " + dir.file("ok.json.gz")), 0);
  EXPECT_EQ(read_maybe_compressed(dir.file("ok.json.gz")), "{\"traceEvents\":[]}");
}
