// The recorder's memory grows about 2.5 KB/s over a 10-minute host-only recording, still rising at the end: SQLite's
// page cache of the writer filling to its 2 MB default at the rate the recording grows (it then stays there:
// bench/soak/recorder_soak.sh, docs/benchmarks/recorder-memory.md). These tests hold the rest of
// the recorder to no growth at all: after a warm-up, many more batches (writer) or ticks with processes coming and
// going (host sampler) must leave the heap where it was.
#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <random>

#include "model/counting_sink.h"
#include "sample/procfs_sampler.h"
#include "store/recording_writer.h"
#include "test_util.h"

using namespace stackscope;

namespace {

// Bytes the program has allocated and not freed (every arena, and the chunks malloc maps on its own).
size_t heap_in_use() {
  const struct mallinfo2 m = ::mallinfo2();
  return m.uordblks + m.hblkhd;
}

}  // namespace

TEST(RecorderMemory, WriterHeapStaysFlatOverManyBatches) {
  TempDir dir;
  RecordingWriter w(dir.file("m.sdb"));
  std::vector<SeriesId> ids;
  for (int s = 0; s < 400; ++s)
    ids.push_back(w.add_series({0, "host.metric" + std::to_string(s), Subsystem::cpu, "ratio", SeriesKind::gauge,
                                SeriesCategory::dynamic, "h", "", "procfs"}));
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> value(0, 100);  // noisy values: blocks that compress little
  std::vector<Sample> tick;
  int64_t t = 1'000'000'000;
  auto write_ticks = [&](int n) {
    for (int i = 0; i < n; ++i, t += 100'000'000) {
      tick.clear();
      for (SeriesId id : ids) tick.push_back({id, t, value(rng)});
      w.append_samples(tick);
      if (i % 10 == 9) w.flush();  // one batch per second of ticks, as the recorder commits
    }
    w.flush();
  };
  // Warm-up: 4,000 ticks (~10 MB of blocks) fill SQLite's page cache and the writer's buffers.
  write_ticks(4000);
  const size_t warm = heap_in_use();
  write_ticks(12000);  // three times as much again
  const size_t after = heap_in_use();
  EXPECT_LT(static_cast<double>(after) - static_cast<double>(warm), 256 * 1024.0)
      << "heap " << warm << " -> " << after << " bytes";
  w.close();
}

TEST(RecorderMemory, HostSamplerHeapStaysFlatWhileProcessesComeAndGo) {
  ProcfsSamplerOptions o;
  o.proc_cpu_period_ms = 0;  // the per-process family at every tick: the most churn
  ProcfsSampler sampler(o);
  CountingSink sink;
  ASSERT_TRUE(sampler.open(sink, "h").running);
  auto ticks = [&](int n) {
    for (int i = 0; i < n; ++i) {
      // A process that lives across one tick and is gone by the next: new pids and names all the time.
      const pid_t child = ::fork();
      if (child == 0) {
        ::usleep(2000);
        ::_exit(0);
      }
      sampler.tick();
      ::waitpid(child, nullptr, 0);
    }
  };
  ticks(200);
  const size_t warm = heap_in_use();
  ticks(800);
  const size_t after = heap_in_use();
  EXPECT_GT(sink.samples, 0u);
  EXPECT_LT(static_cast<double>(after) - static_cast<double>(warm), 128 * 1024.0)
      << "heap " << warm << " -> " << after << " bytes";
}
