// The streaming window tables (store/recording_window_tables.h) on a synthetic GPU job recording
// (store/synthetic_recording.h): the same columns as an exact computation over every event, within the
// histogram's stated error; the generator is deterministic; the per-window latency state stays bounded.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "analyze/detectors/thresholds.h"
#include "analyze/features/window_layer_features.h"
#include "store/errors.h"
#include "store/recording_reader.h"
#include "store/recording_window_tables.h"
#include "store/synthetic_recording.h"
#include "test_util.h"

using namespace stackscope;

namespace {

// A short job at full rates: ~16 k events/s, every layer, some windows with thousands of calls of one name.
SyntheticGpuJobOptions small_job(uint64_t seed = 7) {
  SyntheticGpuJobOptions o;
  o.seconds = 8;
  o.seed = seed;
  o.cpus = 4;
  return o;
}

double quantile(std::vector<double> v, double q) { return analyze::threshold_at_quantile(std::span<const double>(v), q); }

// The columns of one call layer computed exactly from every event (what CallWindowFeatures computed before it
// kept histograms): per name and window the list of log10 latencies (as float, like the old code), etc.
struct ExactCallLayer {
  std::map<std::string, uint64_t> count;
  std::map<std::string, std::map<size_t, std::vector<double>>> lat, bw;
  std::map<std::string, std::map<size_t, double>> bytes, calls;
  std::vector<double> total;
};

ExactCallLayer exact_layer(const RecordingReader& r, Layer layer, const analyze::WindowGrid& grid) {
  ExactCallLayer x;
  x.total.assign(grid.count, 0);
  r.for_each_event({.layers = {layer}}, [&](const Event& e) {
    const auto w = grid.index_of(e.start_ns);
    if (!w) return;
    ++x.count[e.name];
    ++x.total[*w];
    x.calls[e.name][*w] += 1;
    const bool timed = !(e.flags & (kEventInstant | kEventUnfinished));
    const double dur = static_cast<double>(std::max<int64_t>(e.duration_ns, 1));
    const double b = e.arg("bytes") ? static_cast<double>(std::max<int64_t>(e.arg_int("bytes"), 0)) : -1;
    if (b >= 0) x.bytes[e.name][*w] += b;
    if (timed) {
      x.lat[e.name][*w].push_back(static_cast<float>(std::log10(std::max(dur, 1.0))));
      if (b >= 0) x.bw[e.name][*w].push_back(static_cast<float>(std::log10(std::max(b / (dur * 1e-9), 1.0))));
    }
  });
  return x;
}

size_t column(const analyze::WindowFeatureTable& t, const std::string& name) {
  for (size_t c = 0; c < t.columns.size(); ++c)
    if (t.columns[c] == name) return c;
  ADD_FAILURE() << "no column " << name;
  return 0;
}

}  // namespace

TEST(WindowScale, TablesMatchAnExactComputationWithinTheHistogramError) {
  TempDir dir;
  const auto summary = write_synthetic_gpu_job(dir.file("job.sdb"), small_job());
  ASSERT_GT(summary.events, 100'000u);
  const RecordingReader r(dir.file("job.sdb"));
  const RecordingWindowTables got = read_window_tables(r);
  ASSERT_EQ(got.grid.count, 8u);
  for (const char* l : {"cuda", "torch", "python", "nccl", "nvml", "host"}) EXPECT_TRUE(got.tables.count(l)) << l;

  // Error bound: half a 0.01-decade bin where a window holds more than kExactValues values, plus float rounding.
  const double tolerance = analyze::CallWindowFeatures::kLogBinWidth / 2 + 1e-6;
  size_t binned_cells = 0, exact_cells = 0;
  for (Layer layer : {Layer::cuda, Layer::torch, Layer::python, Layer::nccl}) {
    const std::string ln(layer_name(layer));
    const analyze::WindowFeatureTable& t = got.tables.at(ln);
    const ExactCallLayer x = exact_layer(r, layer, got.grid);
    // The names with columns: the 12 most frequent (ties by name), and cuda's sync and memory calls.
    std::vector<std::pair<uint64_t, std::string>> by_count;
    for (auto& [n, c] : x.count) by_count.emplace_back(c, n);
    std::sort(by_count.begin(), by_count.end(), [](auto& a, auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
    std::set<std::string> want;
    for (size_t i = 0; i < std::min<size_t>(12, by_count.size()); ++i) want.insert(by_count[i].second);
    if (layer == Layer::cuda)
      for (auto& n : analyze::cuda_sync_and_memory_calls())
        if (x.count.count(n)) want.insert(n);
    EXPECT_EQ(std::set<std::string>(t.subjects.begin(), t.subjects.end()), want) << ln;

    for (const std::string& n : want) {
      const std::string cn = n.find(' ') == std::string::npos ? n : [&] {
        std::string s = n;
        for (char& ch : s)
          if (ch == ' ') ch = '_';
        return s;
      }();
      for (size_t w = 0; w < got.grid.count; ++w) {
        const auto row = static_cast<Eigen::Index>(w);
        auto calls = x.calls.count(n) && x.calls.at(n).count(w) ? x.calls.at(n).at(w) : 0.0;
        EXPECT_NEAR(t.values(row, static_cast<Eigen::Index>(column(t, cn + ".log10_count"))), std::log10(1 + calls), 1e-12);
        if (x.bytes.count(n)) {
          const double b = x.bytes.at(n).count(w) ? x.bytes.at(n).at(w) : 0.0;
          EXPECT_NEAR(t.values(row, static_cast<Eigen::Index>(column(t, cn + ".log10_bytes"))), std::log10(1 + b), 1e-12);
        }
      }
      auto check_stat = [&](const std::map<std::string, std::map<size_t, std::vector<double>>>& lists,
                            const std::string& suffix, double q) {
        if (!lists.count(n)) return;
        std::vector<double> all;
        for (auto& [w, v] : lists.at(n)) all.insert(all.end(), v.begin(), v.end());
        const double overall = quantile(all, 0.5);
        bool overall_binned = all.size() > analyze::CallWindowFeatures::kExactOverall;
        for (auto& [w, v] : lists.at(n)) overall_binned = overall_binned || v.size() > analyze::CallWindowFeatures::kExactValues;
        const size_t c = column(t, cn + suffix);
        for (size_t w = 0; w < got.grid.count; ++w) {
          const auto it = lists.at(n).find(w);
          const bool has = it != lists.at(n).end();
          const double exact = has ? quantile(it->second, q) : overall;
          const bool binned = (has && it->second.size() > analyze::CallWindowFeatures::kExactValues) ||
                              (!has && overall_binned);
          (binned ? binned_cells : exact_cells) += 1;
          EXPECT_NEAR(t.values(static_cast<Eigen::Index>(w), static_cast<Eigen::Index>(c)), exact, binned ? tolerance : 1e-12)
              << ln << " " << cn << suffix << " window " << w << (binned ? " (histogram)" : " (exact values)");
        }
      };
      check_stat(x.lat, ".median_log10_lat_ns", 0.5);
      check_stat(x.lat, ".p95_log10_lat_ns", 0.95);
      if (layer == Layer::nccl) check_stat(x.bw, ".median_log10_bw_Bps", 0.5);
    }
    const size_t calls_col = column(t, ln + ".log10_calls");
    for (size_t w = 0; w < got.grid.count; ++w)
      EXPECT_NEAR(t.values(static_cast<Eigen::Index>(w), static_cast<Eigen::Index>(calls_col)), std::log10(1 + x.total[w]), 1e-12);
  }
  EXPECT_GT(binned_cells, 100u) << "the histogram path is exercised";
  EXPECT_GT(exact_cells, 100u) << "the exact path is exercised";

  // The one-pass tables equal those CallWindowFeatures builds from Event objects, one layer at a time.
  for (Layer layer : {Layer::cuda, Layer::python}) {
    analyze::CallWindowOptions co;
    if (layer == Layer::cuda) co.always_names = analyze::cuda_sync_and_memory_calls();
    analyze::CallWindowFeatures acc(layer, got.grid, co);
    r.for_each_event({.layers = {layer}}, [&](const Event& e) { acc.add(e); });
    const auto t = acc.table();
    const auto& g = got.tables.at(std::string(layer_name(layer)));
    EXPECT_EQ(t.columns, g.columns);
    EXPECT_EQ(t.filled, g.filled);
    EXPECT_TRUE(t.values == g.values) << layer_name(layer);
  }
}

TEST(WindowScale, GeneratorIsDeterministicAndShapedLikeARecording) {
  TempDir dir;
  const auto a = write_synthetic_gpu_job(dir.file("a.sdb"), small_job(3));
  const auto b = write_synthetic_gpu_job(dir.file("b.sdb"), small_job(3));
  EXPECT_EQ(a.events, b.events);
  EXPECT_EQ(a.samples, b.samples);
  const RecordingReader ra(dir.file("a.sdb")), rb(dir.file("b.sdb"));
  std::vector<std::string> ea, eb;
  auto line = [](const Event& e) {
    std::string s = std::string(layer_name(e.layer)) + e.name + std::to_string(e.start_ns) + std::to_string(e.duration_ns);
    for (auto& arg : e.args) s += arg.key;
    return s;
  };
  ra.for_each_event({}, [&](const Event& e) { ea.push_back(line(e)); });
  rb.for_each_event({}, [&](const Event& e) { eb.push_back(line(e)); });
  EXPECT_EQ(ea, eb);
  // Rates as asked (12 k launches/s, 4 k torch events/s), every layer, 8 host series per CPU plus 54 others,
  // and the recorder's meta.
  const auto s = ra.summary();
  EXPECT_NEAR(static_cast<double>(s.events_by_layer.at("cuda")) / 8, 12'000, 1'500);
  EXPECT_NEAR(static_cast<double>(s.events_by_layer.at("torch")) / 8, 4'000, 600);
  EXPECT_GT(s.events_by_layer.at("nccl"), 0u);
  EXPECT_GT(s.events_by_layer.at("python"), 1'000u);
  EXPECT_EQ(ra.meta_or("pid"), "4242");
  EXPECT_NEAR(static_cast<double>(ra.data_span()->second - ra.data_span()->first) * 1e-9, 8, 0.5);
  size_t nvml = 0;
  for (auto& si : ra.series()) nvml += si.source == "nvml";
  EXPECT_EQ(ra.series().size() - nvml, 4u * 8 + 54);
  const auto c = write_synthetic_gpu_job(dir.file("c.sdb"), small_job(4));
  EXPECT_NE(c.events, a.events) << "another seed, another job";
}

TEST(WindowScale, ABusyWindowKeepsABoundedHistogramAndItsCounts) {
  // 1.2 M calls of one name in one window, most of them in one 0.01-decade bin: the bin's count passes 20 bits
  // and continues in a second entry; count, median and p95 stay right.
  const auto grid = analyze::make_window_grid(0, 1'000'000'000, 1'000'000'000);
  analyze::CallWindowFeatures acc(Layer::cuda, grid);
  analyze::CallRecord c;
  c.layer = Layer::cuda;
  c.name = "cudaLaunchKernel";
  for (int i = 0; i < 1'200'000; ++i) {
    c.start_ns = i * 800;
    c.duration_ns = i % 10 == 9 ? 100'000 : 1'000;  // 90 % at 1 us, 10 % at 100 us
    acc.add(c);
  }
  EXPECT_EQ(acc.events(), 1'200'000u);
  const auto t = acc.table();
  EXPECT_NEAR(t.values(0, static_cast<Eigen::Index>(column(t, "cudaLaunchKernel.log10_count"))), std::log10(1'200'001.0), 1e-12);
  EXPECT_NEAR(t.values(0, static_cast<Eigen::Index>(column(t, "cudaLaunchKernel.median_log10_lat_ns"))), 3, 0.0051);
  EXPECT_NEAR(t.values(0, static_cast<Eigen::Index>(column(t, "cudaLaunchKernel.p95_log10_lat_ns"))), 5, 0.0051);
  EXPECT_NEAR(t.values(0, static_cast<Eigen::Index>(column(t, "cuda.busy_fraction"))), (1'080'000 * 1e3 + 120'000 * 1e5) / 1e9, 1e-9);
}

TEST(WindowScale, BadInputIsAClearError) {
  TempDir dir;
  write_synthetic_gpu_job(dir.file("job.sdb"), [] {
    auto o = small_job();
    o.seconds = 1;
    return o;
  }());
  const RecordingReader r(dir.file("job.sdb"));
  WindowTablesOptions o;
  o.window_s = 0;
  EXPECT_THROW(read_window_tables(r, o), std::invalid_argument);
  o.window_s = 1e-8;  // 100 M windows in a second: refused, not gigabytes allocated
  EXPECT_THROW(read_window_tables(r, o), std::invalid_argument);
  o.window_s = 0.25;
  o.layers = {Layer::kernel};
  const auto t = read_window_tables(r, o);
  EXPECT_TRUE(t.tables.empty()) << "no kernel events: no kernel table";
  EXPECT_EQ(t.events.at("kernel"), 0u);
  write_file(dir.file("junk.sdb"), "not a recording");
  EXPECT_THROW(RecordingReader(dir.file("junk.sdb")), RecordingError);
  SyntheticGpuJobOptions bad;
  bad.seconds = 0;
  EXPECT_THROW(write_synthetic_gpu_job(dir.file("bad.sdb"), bad), std::invalid_argument);
}
