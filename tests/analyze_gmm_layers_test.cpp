// eACGM per-layer analysis end to end: a recording with planted slow CUDA calls and an NVML spike, analysed by
// `stackscope analyze --detector gmm`; the planted items must be the ones flagged, and findings stored.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "analyze/features/layer_features.h"
#include "store/recording_reader.h"
#include "store/recording_writer.h"
#include "test_util.h"

using namespace stackscope;

namespace {

constexpr int64_t kMs = 1'000'000;

struct Planted {
  std::set<int64_t> slow_starts;  // start_ns of the planted slow cudaLaunchKernel calls
  int64_t nvml_spike_t = 0;
};

Planted write_recording(const std::string& path) {
  Planted p;
  RecordingWriter w(path);
  w.set_meta("host", "testhost");
  std::mt19937 rng(42);
  std::lognormal_distribution<double> jitter(0.0, 0.08);
  const int64_t t0 = 1'000'000'000;
  for (int i = 0; i < 2000; ++i) {
    Event e;
    e.layer = Layer::cuda;
    e.flags = kEventHostEnqueue;
    e.pid = 100;
    e.tid = 101;
    e.start_ns = t0 + i * kMs;
    const bool slow = i % 400 == 199;  // 5 planted: 500 us instead of 5 us
    e.duration_ns = static_cast<int64_t>((slow ? 500'000.0 : 5'000.0) * jitter(rng));
    e.name = "cudaLaunchKernel";
    if (slow) p.slow_starts.insert(e.start_ns);
    w.append_event(std::move(e));
    Event m;  // a second group with its own scale: must not be flagged
    m.layer = Layer::cuda;
    m.pid = 100;
    m.tid = 101;
    m.start_ns = t0 + i * kMs + 100'000;
    m.duration_ns = static_cast<int64_t>(40'000.0 * jitter(rng));
    m.name = "cudaMemcpyAsync";
    m.args.push_back({"bytes", static_cast<int64_t>(1 << 20)});
    w.append_event(std::move(m));
  }
  // NVML: utilisation and power of gpu0 every 100 ms; one sample with power far off.
  SeriesInfo util{0, "gpu.util.sm", Subsystem::gpu, "ratio", SeriesKind::gauge, SeriesCategory::dynamic, "testhost", "gpu0", "nvml"};
  SeriesInfo power{0, "gpu.power", Subsystem::gpu, "watts", SeriesKind::gauge, SeriesCategory::dynamic, "testhost", "gpu0", "nvml"};
  const SeriesId su = w.add_series(util), sp = w.add_series(power);
  std::normal_distribution<double> g(0, 1);
  std::vector<Sample> samples;
  for (int i = 0; i < 300; ++i) {
    const int64_t t = t0 + i * 100 * kMs;
    const double u = 0.9 + 0.02 * g(rng);
    double watts = 250 + 300 * (u - 0.9) + 3 * g(rng);
    if (i == 150) watts = 420, p.nvml_spike_t = t;
    samples.push_back({su, t, u});
    samples.push_back({sp, t, watts});
  }
  w.append_samples(samples);
  w.close();
  return p;
}

}  // namespace

TEST(AnalyzeGmmLayers, FeatureRowsMapBackToEvents) {
  std::vector<Event> ev(3);
  for (int i = 0; i < 3; ++i) {
    ev[static_cast<size_t>(i)].layer = Layer::nccl;
    ev[static_cast<size_t>(i)].name = "ncclAllReduce";
    ev[static_cast<size_t>(i)].start_ns = 1000 * (3 - i);  // out of order
    ev[static_cast<size_t>(i)].duration_ns = 1'000'000;
    ev[static_cast<size_t>(i)].args.push_back({"bytes", int64_t{1'000'000'000}});
  }
  ev[1].flags = kEventInstant;
  const auto groups = analyze::event_feature_groups(ev);
  ASSERT_EQ(groups.size(), 1u);
  const auto& g = groups[0];
  EXPECT_EQ(g.layer, "nccl");
  ASSERT_EQ(g.x.rows(), 2);  // the instant is left out
  ASSERT_EQ(g.columns.size(), 3u);
  EXPECT_EQ(g.columns[2].display, "GB_per_s");
  EXPECT_NEAR(g.columns[2].to_display(g.x(0, 2)), 1000.0, 1e-6);  // 1 GB in 1 ms
  EXPECT_NEAR(g.columns[0].to_display(g.x(0, 0)), 1000.0, 1e-9);  // latency_us
  EXPECT_EQ(g.source_index, (std::vector<size_t>{2, 0}));         // time order, indices into the input
}

TEST(AnalyzeGmmLayers, PlantedSlowCallsAreTheOnesFlaggedAndStored) {
  TempDir dir;
  const std::string rec = dir.file("run.sdb");
  const Planted planted = write_recording(rec);
  std::string out;
  ASSERT_EQ(run_command(std::string(STACKSCOPE_BIN) + " analyze " + rec + " --detector gmm --json", &out), 0) << out;
  const auto j = nlohmann::json::parse(out)["gmm"]["recordings"][0];
  std::set<int64_t> flagged_cuda;
  bool nvml_spike = false;
  for (const auto& f : j["findings"]) {
    if (f["layer"] == "cuda") {
      EXPECT_EQ(f["subject"], "cudaLaunchKernel") << f.dump();
      EXPECT_EQ(f["evidence"][0]["feature"], "latency_us");  // why: the latency deviates
      EXPECT_GT(f["evidence"][0]["value"].get<double>(), 300.0);
      EXPECT_LT(f["evidence"][0]["expected"].get<double>(), 10.0);
      flagged_cuda.insert(f["t_start_ns"].get<int64_t>());
    } else if (f["layer"] == "nvml") {
      EXPECT_EQ(f["t_start_ns"].get<int64_t>(), planted.nvml_spike_t) << f.dump();
      EXPECT_EQ(f["evidence"][0]["feature"], "gpu.power_watts");
      nvml_spike = true;
    } else {
      ADD_FAILURE() << "unexpected finding " << f.dump();
    }
  }
  EXPECT_EQ(flagged_cuda, planted.slow_starts);
  EXPECT_TRUE(nvml_spike);
  // Stored in the recording under detector "gmm".
  RecordingReader reader(rec);
  const auto stored = reader.findings();
  size_t gmm = 0;
  for (const auto& f : stored) gmm += f.detector == "gmm";
  EXPECT_EQ(gmm, flagged_cuda.size() + 1);
  // The text report names the layer and the deviating feature.
  ASSERT_EQ(run_command(std::string(STACKSCOPE_BIN) + " analyze " + rec + " --detector gmm --no-store", &out), 0);
  EXPECT_NE(out.find("cuda    4000 items, 5 anomalous"), std::string::npos) << out;
  EXPECT_NE(out.find("latency_us 5"), std::string::npos) << out;
}

TEST(AnalyzeGmmLayers, NoStoreLeavesTheRecordingAlone) {
  TempDir dir;
  const std::string rec = dir.file("run.sdb");
  write_recording(rec);
  std::string out;
  ASSERT_EQ(run_command(std::string(STACKSCOPE_BIN) + " analyze " + rec + " --detector gmm --no-store --layers cuda", &out), 0)
      << out;
  EXPECT_EQ(out.find("nvml"), std::string::npos) << out;  // only the layers asked for
  RecordingReader reader(rec);
  EXPECT_TRUE(reader.findings().empty());
}
