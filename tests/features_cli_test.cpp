// `stackscope features`: per-window layer features of a recording written here with known events and samples.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "store/numeric_csv.h"
#include "store/recording_writer.h"
#include "test_util.h"

using namespace stackscope;

namespace {

constexpr int64_t kS = 1'000'000'000;
constexpr int64_t kT0 = 10 * kS;  // the recording's first event

Event call(const std::string& name, int64_t start, int64_t dur, int depth = 0, int64_t bytes = -1) {
  Event e;
  e.layer = Layer::cuda;
  e.pid = 100;
  e.tid = 101;
  e.start_ns = start;
  e.duration_ns = dur;
  e.name = name;
  if (bytes >= 0) e.args.push_back({"bytes", bytes});
  e.args.push_back({"depth", static_cast<int64_t>(depth)});
  return e;
}

// Windows of 1 s from kT0: [10,11) [11,12) [12,13) [13,14) [14,15); the last sample at 15.2 s leaves a partial
// window that is dropped.
void write_recording(const std::string& path) {
  RecordingWriter w(path);
  w.set_meta("pid", "100");
  // cudaLaunchKernel: w0 latencies 10^2, 10^3, 10^4 ns; w1 10^3; none in w2; w3 10^5.
  for (int64_t d : {100, 1000, 10000}) w.append_event(call("cudaLaunchKernel", kT0 + d * 1000, d));
  w.append_event(call("cudaLaunchKernel", kT0 + kS + 5, 1000));
  w.append_event(call("cudaLaunchKernel", kT0 + 3 * kS + 5, 100000));
  // w2: a 1 ms cudaMalloc of 999 bytes with a nested cuMemAlloc (depth 1: not busy time twice).
  w.append_event(call("cudaMalloc", kT0 + 2 * kS + 10, 1'000'000, 0, 999));
  w.append_event(call("cuMemAlloc", kT0 + 2 * kS + 20, 500'000, 1, 999));
  // A 1 s synchronisation from 13.5 s: half its time in w3, half in w4.
  w.append_event(call("cudaStreamSynchronize", kT0 + 3 * kS + kS / 2, kS));
  // NCCL in w1: two all-reduces of 1 MB in 1 ms and 0.1 ms (1 and 10 GB/s).
  for (int64_t d : {1'000'000, 100'000}) {
    Event e = call("ncclAllReduce", kT0 + kS + d, d, 0, 1'000'000);
    e.layer = Layer::nccl;
    w.append_event(std::move(e));
  }
  Event instant = call("cudaLaunchKernel", kT0 + 4 * kS + 1, 0);
  instant.flags = kEventInstant;  // counted, but no latency
  w.append_event(std::move(instant));

  auto series = [&](const std::string& name, const std::string& device, SeriesKind kind) {
    return w.add_series({0, name, Subsystem::gpu, "ratio", kind, SeriesCategory::dynamic, "h", device, "nvml"});
  };
  const SeriesId util = series("gpu.util", "gpu0", SeriesKind::gauge);
  const SeriesId energy = series("gpu.energy", "gpu0", SeriesKind::counter);
  const SeriesId total = series("gpu.mem.total", "gpu0", SeriesKind::static_value);
  const SeriesId mine = series("gpu.proc.sm_util", "gpu0/pid100", SeriesKind::gauge);
  const SeriesId other_sm = series("gpu.proc.sm_util", "gpu0/pid200", SeriesKind::gauge);
  const SeriesId other_mem = series("gpu.proc.mem.used", "gpu0/pid200", SeriesKind::gauge);
  const SeriesId load = w.add_series({0, "cpu.load.1m", Subsystem::cpu, "", SeriesKind::gauge,
                                      SeriesCategory::dynamic, "h", "", "procfs"});
  const int64_t ms = kS / 1000;
  std::vector<Sample> s{{util, kT0 + 100 * ms, 0.5},   {util, kT0 + 600 * ms, 0.7},    {util, kT0 + 2500 * ms, 0.2},
                        {util, kT0 + 4500 * ms, 1.0},  {util, kT0 + 5200 * ms, 0.1},   {energy, kT0, 100},
                        {energy, kT0 + kS, 200},       {energy, kT0 + 2 * kS, 250},    {total, kT0, 8e10},
                        {mine, kT0 + 500 * ms, 0.4},   {other_sm, kT0 + 2500 * ms, 0.3},
                        {other_mem, kT0 + 2500 * ms, 1e9}, {load, kT0 + 1500 * ms, 2.0}};
  w.append_samples(s);
  w.close();
}

std::string bin() { return STACKSCOPE_BIN; }

// Column name -> values per window.
std::map<std::string, std::vector<double>> read_table(const std::string& path) {
  const NumericTable t = read_numeric_csv(path);
  std::map<std::string, std::vector<double>> cols;
  for (size_t r = 0; r < t.rows(); ++r)
    for (size_t c = 0; c < t.columns.size(); ++c) cols[t.columns[c]].push_back(t.values[r * t.columns.size() + c]);
  return cols;
}

void expect_column(const std::map<std::string, std::vector<double>>& t, const std::string& name,
                   const std::vector<double>& want) {
  auto it = t.find(name);
  ASSERT_NE(it, t.end()) << "no column " << name;
  ASSERT_EQ(it->second.size(), want.size()) << name;
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(it->second[i], want[i], 1e-9) << name << " window " << i;
}

}  // namespace

TEST(FeaturesCli, CudaWindowsCountsLatenciesBytesAndBusyTime) {
  TempDir dir;
  write_recording(dir.file("r.sdb"));
  std::string out;
  // --names 1: cudaLaunchKernel is the most frequent; the sync and memory calls come in as always-wanted names.
  ASSERT_EQ(run_command(bin() + " features " + dir.file("r.sdb") + " --layer cuda --names 1 -o " + dir.file("c.csv"),
                        &out),
            0)
      << out;
  const auto t = read_table(dir.file("c.csv"));
  expect_column(t, "t0_ns", {10e9, 11e9, 12e9, 13e9, 14e9});
  expect_column(t, "t1_ns", {11e9, 12e9, 13e9, 14e9, 15e9});
  const double l2 = std::log10(2);
  expect_column(t, "cudaLaunchKernel.log10_count", {std::log10(4), l2, 0, l2, l2});
  // Windows 2 and 4 have no finished call: the median over the recording, log10 of {2,3,4,3,5} -> 3.
  expect_column(t, "cudaLaunchKernel.median_log10_lat_ns", {3, 3, 3, 5, 3});
  expect_column(t, "cudaLaunchKernel.p95_log10_lat_ns", {3.9, 3, 3, 5, 3});
  expect_column(t, "cudaMalloc.log10_count", {0, 0, l2, 0, 0});
  expect_column(t, "cudaMalloc.log10_bytes", {0, 0, std::log10(1000), 0, 0});
  expect_column(t, "cuMemAlloc.log10_count", {0, 0, l2, 0, 0});
  expect_column(t, "cudaStreamSynchronize.median_log10_lat_ns", {9, 9, 9, 9, 9});
  expect_column(t, "cuda.log10_calls", {std::log10(4), l2, std::log10(3), std::log10(3), l2});
  // Outermost calls only (the nested cuMemAlloc is inside cudaMalloc); the sync is split over w3 and w4.
  expect_column(t, "cuda.busy_fraction", {11100e-9, 1000e-9, 1e-3, 0.5 + 1e-4, 0.5});
  EXPECT_EQ(t.size(), 2u + 3 + 4 + 4 + 3 + 2) << "columns: cudaLaunchKernel 3, cudaMalloc 4, cuMemAlloc 4, sync 3";

  ASSERT_EQ(run_command(bin() + " features " + dir.file("r.sdb") + " --layer cuda --window 2.5 --json -o " +
                            dir.file("c2.csv"),
                        &out),
            0)
      << out;
  EXPECT_NE(out.find("\"windows\": 2"), std::string::npos) << out;
  EXPECT_NE(out.find("\"filled_windows\""), std::string::npos) << out;
}

TEST(FeaturesCli, NcclBytesAndBandwidth) {
  TempDir dir;
  write_recording(dir.file("r.sdb"));
  std::string out;
  ASSERT_EQ(run_command(bin() + " features " + dir.file("r.sdb") + " --layer nccl -o " + dir.file("n.csv"), &out), 0)
      << out;
  const auto t = read_table(dir.file("n.csv"));
  expect_column(t, "ncclAllReduce.log10_count", {0, std::log10(3), 0, 0, 0});
  expect_column(t, "ncclAllReduce.log10_bytes", {0, std::log10(2e6 + 1), 0, 0, 0});
  expect_column(t, "ncclAllReduce.median_log10_bw_Bps", {9.5, 9.5, 9.5, 9.5, 9.5});
  expect_column(t, "ncclAllReduce.median_log10_lat_ns", {5.5, 5.5, 5.5, 5.5, 5.5});
  expect_column(t, "nccl.busy_fraction", {0, 1.1e-3, 0, 0, 0});
}

TEST(FeaturesCli, NvmlWindowMeansCountersAndOtherProcesses) {
  TempDir dir;
  write_recording(dir.file("r.sdb"));
  std::string out;
  ASSERT_EQ(run_command(bin() + " features " + dir.file("r.sdb") + " --layer nvml -o " + dir.file("n.csv"), &out), 0)
      << out;
  const auto t = read_table(dir.file("n.csv"));
  // A window without a sample repeats the previous window's value.
  expect_column(t, "gpu0.gpu.util.mean", {0.6, 0.6, 0.2, 0.2, 1.0});
  expect_column(t, "gpu0.gpu.util.max", {0.7, 0.7, 0.2, 0.2, 1.0});
  // Counter: 100 J in the second to 11 s, 50 J to 12 s; before the first rate, the first rate.
  expect_column(t, "gpu0.gpu.energy.rate_per_s", {100, 100, 50, 50, 50});
  EXPECT_EQ(t.count("gpu0.gpu.mem.total.mean"), 0u) << "static series are left out";
  // pid 100 is the recording's own process; pid 200 is another process on the GPU in w2.
  expect_column(t, "gpu0.procs.count", {1, 1, 1, 1, 1});
  expect_column(t, "gpu0.procs.max_sm_util", {0.4, 0.4, 0.3, 0.3, 0.3});
  expect_column(t, "gpu0.other_procs.count", {0, 0, 1, 1, 1});
  expect_column(t, "gpu0.other_procs.sm_util", {0, 0, 0.3, 0.3, 0.3});
  expect_column(t, "gpu0.other_procs.mem_used", {0, 0, 1e9, 1e9, 1e9});
  EXPECT_EQ(t.count("cpu.load.1m.mean"), 0u) << "host series are not nvml";

  ASSERT_EQ(run_command(bin() + " features " + dir.file("r.sdb") + " --layer host -o " + dir.file("h.csv"), &out), 0)
      << out;
  const auto h = read_table(dir.file("h.csv"));
  expect_column(h, "cpu.load.1m.mean", {2, 2, 2, 2, 2});
  EXPECT_EQ(h.size(), 3u);
}

TEST(FeaturesCli, LikeWritesAnotherRecordingsColumns) {
  TempDir dir;
  write_recording(dir.file("r.sdb"));
  {  // a second run: only kernel launches, 10^4 ns each, 2 per second for 3 s
    RecordingWriter w(dir.file("other.sdb"));
    for (int i = 0; i < 6; ++i) w.append_event(call("cudaLaunchKernel", 50 * kS + i * kS / 2, 10000));
    w.close();
  }
  std::string out;
  ASSERT_EQ(run_command(bin() + " features " + dir.file("r.sdb") + " --layer cuda --names 1 -o " + dir.file("ref.csv"),
                        &out),
            0)
      << out;
  ASSERT_EQ(run_command(bin() + " features " + dir.file("other.sdb") + " --layer cuda --like " + dir.file("ref.csv") +
                            " -o " + dir.file("o.csv"),
                        &out),
            0)
      << out;
  const NumericTable ref = read_numeric_csv(dir.file("ref.csv")), other = read_numeric_csv(dir.file("o.csv"));
  EXPECT_EQ(other.columns, ref.columns);
  const auto t = read_table(dir.file("o.csv"));
  expect_column(t, "cudaLaunchKernel.log10_count", {std::log10(3), std::log10(3)});
  expect_column(t, "cudaLaunchKernel.median_log10_lat_ns", {4, 4});
  expect_column(t, "cudaMalloc.log10_count", {0, 0});                // never called here
  expect_column(t, "cudaMalloc.median_log10_lat_ns", {6, 6});        // the reference's median (10^6 ns)
  expect_column(t, "cudaStreamSynchronize.p95_log10_lat_ns", {9, 9});
  EXPECT_NE(run_command(bin() + " features " + dir.file("other.sdb") + " --layer cuda --like " + dir.file("r.sdb") +
                            " -o " + dir.file("o.csv"),
                        &out),
            0);
}

// Durations as a person writes them (before: "--window 1s" was refused with "not in range 0 to 1.8e308"), and a
// bad one names the accepted units.
TEST(FeaturesCli, WindowTakesADurationWithUnits) {
  TempDir dir;
  write_recording(dir.file("r.sdb"));
  std::string out;
  ASSERT_EQ(run_command(bin() + " features " + dir.file("r.sdb") + " --layer cuda --window 1 -o " + dir.file("a.csv"), &out),
            0) << out;
  ASSERT_EQ(run_command(bin() + " features " + dir.file("r.sdb") + " --layer cuda --window 1000ms -o " + dir.file("b.csv"),
                        &out),
            0) << out;
  EXPECT_EQ(read_table(dir.file("a.csv")), read_table(dir.file("b.csv")));
  ASSERT_EQ(run_command(bin() + " features " + dir.file("r.sdb") + " --layer cuda --window 2s --baseline 1m -o " +
                            dir.file("c.csv"),
                        &out),
            0) << out;
  EXPECT_EQ(read_table(dir.file("c.csv")).begin()->second.size(), 2u);  // 5.2 s of events in 2 s windows
  EXPECT_NE(run_command(bin() + " features " + dir.file("r.sdb") + " --layer cuda --window 3parsecs -o " + dir.file("d.csv"),
                        &out),
            0);
  EXPECT_NE(out.find("units: ns, us, ms, s"), std::string::npos) << out;
}

TEST(FeaturesCli, BadInputIsAClearError) {
  TempDir dir;
  write_recording(dir.file("r.sdb"));
  { RecordingWriter(dir.file("empty.sdb")).close(); }
  write_file(dir.file("junk.sdb"), "not a recording");
  auto run = [&](const std::string& args, std::string* out) {
    return run_command(bin() + " features " + args + " -o " + dir.file("o.csv"), out);
  };
  std::string out;
  EXPECT_NE(run(dir.file("empty.sdb") + " --layer cuda", &out), 0);
  EXPECT_NE(out.find("holds no events and no samples"), std::string::npos) << out;
  EXPECT_NE(run(dir.file("r.sdb") + " --layer torch", &out), 0);
  EXPECT_NE(out.find("has no torch events"), std::string::npos) << out;
  EXPECT_NE(run(dir.file("r.sdb") + " --layer gpu", &out), 0);
  EXPECT_NE(out.find("--layer"), std::string::npos) << out;
  EXPECT_NE(run(dir.file("r.sdb") + " --layer cuda --window 0", &out), 0);
  EXPECT_NE(out.find("--window"), std::string::npos) << out;
  EXPECT_NE(run(dir.file("junk.sdb") + " --layer cuda", &out), 0);
  EXPECT_NE(out.find("junk.sdb"), std::string::npos) << out;
  // A features CSV as input: options that only shape a recording's table are refused, not ignored.
  ASSERT_EQ(run_command(bin() + " features " + dir.file("r.sdb") + " --layer cuda -o " + dir.file("f.csv"), &out), 0)
      << out;
  EXPECT_NE(run(dir.file("f.csv") + " --window 2 --target-pid 7", &out), 0);
  EXPECT_NE(out.find("is a features CSV: --window, --target-pid apply only to a recording"), std::string::npos) << out;
  EXPECT_EQ(run(dir.file("f.csv") + " --baseline 2", &out), 0) << out;
  EXPECT_EQ(out.find("Segmentation"), std::string::npos);
  ASSERT_EQ(run_command(bin() + " features --help", &out), 0);
  for (const char* opt : {"--layer", "--window", "--names", "--target-pid", "--json", "median latency"})
    EXPECT_NE(out.find(opt), std::string::npos) << opt;
}
