// Disk full: the writer stops cleanly, reports it, and the file keeps every batch committed before.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <chrono>
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
