#include <gtest/gtest.h>

#include <filesystem>

#include "store/errors.h"
#include "store/recording_reader.h"
#include "store/recording_writer.h"
#include "test_util.h"

using namespace stackscope;

TEST(RecordingStore, RoundTripsEventsSamplesAndFindings) {
  TempDir dir;
  std::string path = dir.file("rt.sdb");
  {
    RecordingWriter w(path);
    w.set_meta("command", "python3 train.py");
    SeriesInfo cpu{0, "cpu.time.user", Subsystem::cpu, "jiffies", SeriesKind::counter, SeriesCategory::dynamic, "h1", "cpu0", "procfs"};
    SeriesInfo load{0, "load.1m", Subsystem::cpu, "count", SeriesKind::gauge, SeriesCategory::dynamic, "h1", "", "procfs"};
    SeriesId a = w.add_series(cpu), b = w.add_series(load);
    EXPECT_EQ(a, w.add_series(cpu));
    for (int i = 0; i < 100; ++i) {
      Sample s[2] = {{a, 1000 + i * 100'000'000LL, 5.0 * i}, {b, 1000 + i * 100'000'000LL, 0.25 * i + 0.01}};
      w.append_samples(s);
      Event e;
      e.layer = i % 2 ? Layer::cuda : Layer::nccl;
      e.flags = kEventHostEnqueue;
      e.pid = 42;
      e.tid = 43 + i % 3;
      e.start_ns = 5000 + i * 1000;
      e.duration_ns = 100 + i;
      e.name = i % 2 ? "cudaLaunchKernel" : "ncclAllReduce";
      e.args = {{"bytes", int64_t{1} << 20}, {"kernel", std::string("gemm_") + std::to_string(i % 4)}, {"ratio", 0.5}};
      w.append_event(std::move(e));
    }
    w.add_drops("bpf.ringbuf", 7);
    w.close();
  }
  RecordingReader r(path);
  EXPECT_EQ(r.meta_or("command"), "python3 train.py");
  ASSERT_EQ(r.series().size(), 2u);
  int n = 0;
  r.for_each_event({}, [&](const Event& e) {
    EXPECT_EQ(e.pid, 42u);
    EXPECT_EQ(e.tid, 43u + n % 3);
    EXPECT_EQ(e.start_ns, 5000 + n * 1000);
    EXPECT_EQ(e.duration_ns, 100 + n);
    EXPECT_EQ(e.arg_int("bytes"), 1 << 20);
    EXPECT_EQ(std::get<std::string>(*e.arg("kernel")), "gemm_" + std::to_string(n % 4));
    EXPECT_DOUBLE_EQ(std::get<double>(*e.arg("ratio")), 0.5);
    ++n;
  });
  EXPECT_EQ(n, 100);
  int cuda = 0;
  r.for_each_event({{Layer::cuda}}, [&](const Event& e) { EXPECT_EQ(e.layer, Layer::cuda); ++cuda; });
  EXPECT_EQ(cuda, 50);
  auto samples = r.load_samples();
  ASSERT_EQ(samples.size(), 2u);
  for (auto& [id, tv] : samples) {
    ASSERT_EQ(tv.first.size(), 100u);
    for (int i = 0; i < 100; ++i) {
      EXPECT_EQ(tv.first[i], 1000 + i * 100'000'000LL);
      EXPECT_DOUBLE_EQ(tv.second[i], r.series_by_id(id)->name == "load.1m" ? 0.25 * i + 0.01 : 5.0 * i);
    }
  }
  auto s = r.summary();
  EXPECT_TRUE(s.closed_cleanly);
  EXPECT_EQ(s.events_by_layer["cuda"], 50u);
  EXPECT_EQ(s.drops["bpf.ringbuf"], 7u);
  EXPECT_EQ(s.samples, 200u);
  Finding f;
  f.detector = "test";
  f.subject = "cudaLaunchKernel";
  f.evidence = {{"lat", "latency", 2.0, 1.0, 3.0}};
  store_findings(path, "test", {f});
  RecordingReader r2(path);
  auto fs = r2.findings();
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_EQ(fs[0].evidence.at(0).feature, "latency");
}

TEST(RecordingStore, RejectsMissingAndForeignFiles) {
  TempDir dir;
  EXPECT_THROW(RecordingReader(dir.file("absent.sdb")), RecordingError);
  std::string junk = dir.file("junk.sdb");
  write_file(junk, std::string(5000, 'x'));
  try {
    RecordingReader r(junk);
    FAIL() << "junk accepted";
  } catch (const RecordingError& e) {
    EXPECT_NE(std::string(e.what()).find(junk), std::string::npos);
  }
  EXPECT_THROW(RecordingReader(dir.path()), RecordingError);
}
