// Disk full: the writer stops cleanly, reports it, and the file keeps every batch committed before.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include "model/clock.h"
#include "store/recording_reader.h"
#include "store/recording_writer.h"
#include "test_util.h"

using namespace stackscope;

namespace {
// A tiny tmpfs so "disk full" is real, not simulated. Needs root.
struct TinyFs {
  explicit TinyFs(const std::string& dir, const char* size) : dir_(dir) {
    ok = ::mount("tmpfs", dir.c_str(), "tmpfs", 0, (std::string("size=") + size).c_str()) == 0;
  }
  ~TinyFs() {
    if (ok) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  bool ok = false;
  std::string dir_;
};

const std::string kBin = STACKSCOPE_BIN;

// Fills the file system holding `dir` to its last block.
void fill(const std::string& dir) { run_command("cat /dev/zero > " + dir + "/filler"); }

// The names in `dir`, sorted.
std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}
}  // namespace

TEST(DiskFull, WriterStopsCleanlyAndKeepsCommittedBatches) {
  STACKSCOPE_REQUIRE(::geteuid() == 0, "needs root to mount a tmpfs");
  TempDir dir;
  TinyFs fs(dir.path(), "512k");
  ASSERT_TRUE(fs.ok) << "mount tmpfs failed";
  std::string path = dir.file("full.sdb");
  uint64_t committed_before_failure = 0;
  {
    RecordingWriterOptions o;
    o.flush_interval_ms = 20;
    RecordingWriter w(path, o);
    // Incompressible string arguments fill the disk quickly.
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < 2000000 && !w.failed(); ++i) {
      Event e;
      e.layer = Layer::cuda;
      e.name = "cudaMemcpy";
      e.start_ns = monotonic_ns();
      std::string junk(64, ' ');
      for (auto& c : junk) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        c = static_cast<char>('a' + x % 26);
      }
      e.args = {{"seq", int64_t{i}}, {"junk", junk}};
      w.append_event(std::move(e));
      if (i % 200 == 0) {
        w.flush();
        if (!w.failed()) committed_before_failure = w.stats().flushed_events;
      }
    }
    ASSERT_TRUE(w.failed()) << "the disk never filled";
    EXPECT_NE(w.error().find("full"), std::string::npos) << w.error();
    EXPECT_GT(w.stats().dropped, 0u);
    w.close();
  }
  RecordingReader r(path);
  uint64_t n = 0;
  r.for_each_event({}, [&](const Event& e) {
    EXPECT_EQ(e.arg_int("seq", -1), static_cast<int64_t>(n));
    ++n;
  });
  EXPECT_GE(n, committed_before_failure);
  EXPECT_GT(n, 0u);
}

// A record that cannot start on a full disk says so and removes what it created (the recording, its -wal, -shm and
// -reserve: `info` called them "not a stackscope recording"), and only that: an existing recording stays.
TEST(DiskFull, ARecordThatCannotStartLeavesNothingOfItsOwn) {
  STACKSCOPE_REQUIRE(::geteuid() == 0, "needs root to mount a tmpfs");
  TempDir dir;
  TinyFs fs(dir.path(), "4m");
  STACKSCOPE_REQUIRE(fs.ok, "mounting a tmpfs failed");
  const std::string good = dir.file("good.sdb");
  std::string out;
  ASSERT_EQ(run_command(kBin + " record -q --layers host -d 0.3 -o " + good, &out), 0) << out;
  const std::string before = read_file(good);
  fill(dir.path());
  for (const std::string& args : {" -o " + dir.file("new.sdb"), " --force -o " + good}) {
    EXPECT_EQ(run_command(kBin + " record -q --layers host -d 1" + args, &out), 3) << args << "\n" << out;
    EXPECT_NE(out.find("no space left on " + dir.path() + ": free some space or choose another -o"), std::string::npos)
        << args << "\n" << out;
    EXPECT_EQ(names_in(dir.path()), (std::vector<std::string>{"filler", "good.sdb"})) << args;
    EXPECT_TRUE(read_file(good) == before) << args << ": good.sdb changed";
  }
}

// `record --force` over a good recording, and the disk fills half-way: the good one stays, the new one is left
// beside it (or removed when nothing reached it), with a non-zero exit and a line saying where it is.
TEST(DiskFull, AForcedRecordThatFailsNeverReplacesTheRecording) {
  STACKSCOPE_REQUIRE(::geteuid() == 0, "needs root to mount a tmpfs");
  TempDir dir;
  TinyFs fs(dir.path(), "8m");
  STACKSCOPE_REQUIRE(fs.ok, "mounting a tmpfs failed");
  const std::string good = dir.file("good.sdb");
  std::string out;
  ASSERT_EQ(run_command(kBin + " record -q --layers host -d 0.3 -o " + good, &out), 0) << out;
  const std::string before = read_file(good);
  // The recording runs until its writer fails (-d is an upper bound); the disk fills once the new recording holds
  // samples (`info` reads it while it is written).
  const std::string partial_glob = dir.file("good.sdb.partial-??????");
  EXPECT_EQ(run_command("(" + kBin + " record -q --force --layers host -i 10 -d 60 -o " + good + " & p=$!; " +
                            "for i in $(seq 300); do for f in " + partial_glob + "; do " + kBin + " info --json $f " +
                            "2>/dev/null | grep -Eq '\"samples\": ?[1-9]' && break 2; done; sleep 0.1; done; " +
                            "cat /dev/zero > " + dir.file("filler") + " 2>/dev/null; wait $p; echo status=$?)",
                        &out),
            0);
  EXPECT_NE(out.find("status=3"), std::string::npos) << out;
  EXPECT_TRUE(read_file(good) == before) << "good.sdb was replaced\n" << out;
  std::filesystem::remove(dir.file("filler"));
  std::vector<std::string> partials;
  for (const std::string& name : names_in(dir.path()))
    if (name != "good.sdb" && name.find("-wal") == std::string::npos && name.find("-shm") == std::string::npos)
      partials.push_back(name);
  ASSERT_EQ(partials.size(), 1u) << out;
  EXPECT_EQ(partials[0].rfind("good.sdb.partial-", 0), 0u) << partials[0];
  EXPECT_NE(out.find(good + " is as it was"), std::string::npos) << out;
  EXPECT_NE(out.find("what was recorded is in " + dir.file(partials[0])), std::string::npos) << out;
  EXPECT_EQ(run_command(kBin + " info " + dir.file(partials[0]), &out), 0) << out;
}
