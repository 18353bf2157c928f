// The NVML sampler reads its per-process queries every 500 ms, not every 100 ms round (they are a quarter of a
// busy 4-GPU round's CPU). Does the incident engine still find another process computing on the job's
// GPU, and name it, from per-process series that coarse? Checked on the real H200 recording of tests/data/gpu
// (gpu_recording_test.cpp), its per-process series rewritten as the sampler now writes them: each value the mean of
// the samples since the previous read, one read per period.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <string>

#include "store/recording_reader.h"
#include "store/recording_writer.h"
#include "store/sqlite_db.h"
#include "test_util.h"

namespace {

using namespace stackscope;

const std::string kBin = STACKSCOPE_BIN;
const std::string kData = std::string(STACKSCOPE_SOURCE_DIR) + "/tests/data/gpu/h200x2_cnn_ddp_s24";

// `in` copied to `out` with the gpu.proc.* series read every `period_ns` (utilisations: the mean since the last read;
// memory and presence: the last value), everything else as recorded.
void rewrite_per_process(const std::string& in, const std::string& out, int64_t period_ns) {
  RecordingReader r(in);
  const int64_t start = std::stoll(r.meta_or("start_ns")), end = std::stoll(r.meta_or("end_ns"));
  {
    RecordingWriter w(out);
    for (const auto& [k, v] : r.meta())
      if (k != "start_ns" && k != "end_ns") w.set_meta(k, v);
    std::map<SeriesId, SeriesId> id;
    for (const auto& s : r.series()) id[s.id] = w.add_series(s);
    r.for_each_event({}, [&](const Event& e) { w.append_event(Event(e)); });
    for (const auto& [sid, tv] : r.load_samples()) {
      const SeriesInfo* s = r.series_by_id(sid);
      const auto& [t, v] = tv;
      std::vector<Sample> samples;
      if (s->name.rfind("gpu.proc.", 0) != 0) {
        for (size_t i = 0; i < t.size(); ++i) samples.push_back({id[sid], t[i], v[i]});
      } else {
        const bool mean = s->name == "gpu.proc.sm_util" || s->name == "gpu.proc.mem_util";
        for (size_t i = 0; i < t.size();) {
          const int64_t read = (t[i] - start) / period_ns;
          double sum = 0;
          size_t n = 0, j = i;
          for (; j < t.size() && (t[j] - start) / period_ns == read; ++j, ++n) sum += v[j];
          samples.push_back({id[sid], t[j - 1], mean ? sum / static_cast<double>(n) : v[j - 1]});
          i = j;
        }
      }
      w.append_samples(samples);
    }
    for (const auto& n : r.notes()) w.add_note(n.source, n.text);
    w.close();
  }
  sql::Db db(out, sql::Db::Mode::read_write);
  db.exec("UPDATE meta SET value = '" + std::to_string(start) + "' WHERE key = 'start_ns'");
  db.exec("UPDATE meta SET value = '" + std::to_string(end) + "' WHERE key = 'end_ns'");
}

// (class, first culprit pid or 0) of each incident `analyze` finds.
std::vector<std::pair<std::string, int64_t>> incidents(const std::string& rec) {
  std::string out;
  EXPECT_EQ(run_command(kBin + " analyze --no-store --json " + rec + " 2>/dev/null", &out), 0) << out;
  const auto j = nlohmann::json::parse(out.substr(out.find('{')));
  std::vector<std::pair<std::string, int64_t>> found;
  for (const auto& inc : j["recordings"][0]["incidents"]) {
    const auto& culprits = inc["cause"]["culprits"];
    found.emplace_back(inc["cause"]["class"], culprits.empty() ? 0 : culprits[0].value("pid", int64_t{0}));
  }
  std::sort(found.begin(), found.end());
  return found;
}

// `stragglers --json`'s verdict: its cause and what it says of it.
std::pair<std::string, std::string> straggler_cause(const std::string& rec) {
  std::string out;
  EXPECT_EQ(run_command(kBin + " stragglers --json " + rec + " 2>/dev/null", &out), 0) << out;
  const auto j = nlohmann::json::parse(out.substr(out.find('{')));
  return {j["verdict"].value("cause", ""), j["verdict"].value("cause_detail", "")};
}

// The online engine replayed (analyze --online-log): the first time an incident of `cls` was told, seconds after
// the recording's first window (its detected_at_s); -1 when never.
double told_online_at(const TempDir& dir, const std::string& rec, const std::string& cls) {
  const std::string log = dir.file("online-" + std::to_string(std::hash<std::string>{}(rec)) + ".jsonl");
  std::string out;
  EXPECT_EQ(run_command(kBin + " analyze --no-store --online-log " + log + " " + rec + " 2>&1", &out), 0) << out;
  double first = -1;
  for (const auto& l : json_lines(log))
    if (l.contains("cause") && l["cause"].is_object() && l["cause"].value("class", "") == cls &&
        l.contains("detected_at_s") && (first < 0 || l["detected_at_s"].get<double>() < first))
      first = l["detected_at_s"];
  return first;
}

}  // namespace

TEST(NvmlCadence, PerProcessSeriesReadEveryHalfSecondOrSecondStillNameTheGpuCulprit) {
  TempDir dir;
  const std::string rec = dir.file("gpu.sdb");
  ASSERT_EQ(run_command("xz -dc " + kData + ".sdb.xz > " + rec), 0);
  const auto recorded = incidents(rec);
  // As recorded (per-process series every 100 ms): the GPU contention (culprit pid 850) and the packet loss.
  const std::vector<std::pair<std::string, int64_t>> expected{{"gpu_contention", 850}, {"network", 0}};
  ASSERT_EQ(recorded, expected);
  const auto straggler = straggler_cause(rec);
  ASSERT_EQ(straggler.first, "gpu");
  ASSERT_NE(straggler.second.find("python3 pid 850"), std::string::npos) << straggler.second;
  const double told = told_online_at(dir, rec, "gpu_contention");
  ASSERT_GT(told, 0);
  for (int64_t period_ms : {500, 1000}) {
    SCOPED_TRACE(period_ms);
    const std::string coarse = dir.file("gpu_" + std::to_string(period_ms) + ".sdb");
    rewrite_per_process(rec, coarse, period_ms * 1'000'000);
    {  // the rewrite did thin them (recorded, the series has a sample only where the driver had a new one: about 4 a second)
      RecordingReader a(rec), b(coarse);
      auto count = [](const RecordingReader& r) {
        size_t n = 0;
        for (const auto& [id, tv] : r.load_samples())
          if (r.series_by_id(id)->key() == "gpu.proc.sm_util{gpu0/pid850}") n += tv.first.size();
        return n;
      };
      EXPECT_GT(count(b), 0u);
      EXPECT_LE(count(b) * static_cast<size_t>(period_ms), count(a) * 350) << count(b) << " of " << count(a);
    }
    EXPECT_EQ(incidents(coarse), expected);
    const auto coarse_straggler = straggler_cause(coarse);
    EXPECT_EQ(coarse_straggler.first, "gpu");
    EXPECT_NE(coarse_straggler.second.find("python3 pid 850"), std::string::npos) << coarse_straggler.second;
    // Told online no later than one read period after the recorded series were.
    const double coarse_told = told_online_at(dir, coarse, "gpu_contention");
    EXPECT_GT(coarse_told, 0);
    EXPECT_LE(coarse_told, told + static_cast<double>(period_ms) / 1000 + 1.0) << "recorded: told at " << told;
    std::cerr << "per-process every " << period_ms << " ms: gpu_contention told online at " << coarse_told
              << " s (recorded every 100 ms: " << told << " s)\n";
  }
}
