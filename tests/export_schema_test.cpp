// Perfetto export against Perfetto's real schema (../shared/vendor/perfetto-protos.tar.gz): every exported
// trace decodes with `protoc --decode=perfetto.protos.Trace` and the real protos (rc 0, no field the schema does
// not know), and passes the structural rules trace_processor applies: every track descriptor before its first
// use (and a parent before its child), slices balanced per track, interned data and the samples that use it on
// a sequence that cleared its incremental state first and flag that they need it, callstacks that name
// interned frames, functions and mappings. Traces: the synthetic GPU job (stack samples, NCCL, GPU series,
// planted incidents), ranks merged, and a real recording of the CPU training workload when root.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "perfetto_trace.pb.h"
#include "store/recording_reader.h"
#include "store/recording_writer.h"
#include "store/synthetic_recording.h"
#include "test_util.h"

using namespace stackscope;
namespace pp = perfetto::protos;

namespace {

const std::string kBin = STACKSCOPE_BIN;
const std::string kProtos = std::string(STACKSCOPE_SOURCE_DIR) + "/../shared/vendor/perfetto-protos.tar.gz";

// The real schema, extracted once per test binary run.
const std::string& schema_dir() {
  static TempDir dir;
  static bool extracted = false;
  if (!extracted) {
    extracted = true;
    if (std::filesystem::exists(kProtos)) {
      EXPECT_EQ(run_command("tar -xzf " + kProtos + " -C " + dir.path()), 0);
    }
  }
  return dir.path();
}

struct Decoded {
  int rc = -1;
  std::string head;                  // the start of the text form
  std::string unknown;               // lines of numbered fields (ones the schema does not know), up to 5
  bool has_clock_snapshot = false;
};

// The text form can be hundreds of MB: it stays on disk and grep reads it.
Decoded decode_with_real_schema(const std::string& trace) {
  Decoded d;
  const std::string out = trace + ".txt";
  d.rc = run_command("protoc --decode=perfetto.protos.Trace -I " + schema_dir() +
                     " protos/perfetto/trace/trace.proto < " + trace + " > " + out);
  run_command("head -c 2000 " + out, &d.head);
  run_command("grep -E '^[[:space:]]*[0-9]+(:| \\{)' " + out + " | head -5", &d.unknown);
  d.has_clock_snapshot = run_command("grep -q 'clock_snapshot {' " + out) == 0;
  std::filesystem::remove(out);
  return d;
}

pp::Trace parse(const std::string& path) {
  pp::Trace t;
  EXPECT_TRUE(t.ParseFromString(read_file(path))) << path;
  return t;
}

// The rules trace_processor applies when it imports TrackEvent and PerfSample packets; each broken one a line.
std::vector<std::string> structural_problems(const pp::Trace& trace) {
  std::vector<std::string> bad;
  std::set<uint64_t> tracks;
  std::set<std::pair<int32_t, int32_t>> threads;
  std::map<uint64_t, int> depth;
  struct Seq {
    bool cleared = false;
    uint64_t last_ts = 0;
    std::set<uint64_t> names, frames, callstacks, mappings, paths;
  };
  std::map<uint32_t, Seq> seqs;
  for (int i = 0; i < trace.packet_size(); ++i) {
    const pp::TracePacket& p = trace.packet(i);
    const std::string at = "packet " + std::to_string(i) + ": ";
    if (!p.has_trusted_packet_sequence_id()) bad.push_back(at + "no sequence id");
    Seq& s = seqs[p.trusted_packet_sequence_id()];
    if (p.sequence_flags() & pp::TracePacket::SEQ_INCREMENTAL_STATE_CLEARED) {
      s.cleared = true;
      s.names.clear(), s.frames.clear(), s.callstacks.clear(), s.mappings.clear(), s.paths.clear();
    }
    const bool needs = p.sequence_flags() & pp::TracePacket::SEQ_NEEDS_INCREMENTAL_STATE;
    if (p.has_track_descriptor()) {
      const auto& d = p.track_descriptor();
      if (!d.uuid() || !tracks.insert(d.uuid()).second) bad.push_back(at + "track uuid 0 or repeated");
      if (d.has_parent_uuid() && !tracks.count(d.parent_uuid())) bad.push_back(at + "parent track not described before");
      if (d.has_thread()) threads.insert({d.thread().pid(), d.thread().tid()});
    }
    if (p.has_interned_data()) {
      if (!needs || !s.cleared) bad.push_back(at + "interned data without the sequence's incremental state");
      const auto& in = p.interned_data();
      for (const auto& x : in.function_names()) s.names.insert(x.iid());
      for (const auto& x : in.mapping_paths()) s.paths.insert(x.iid());
      for (const auto& m : in.mappings()) {
        s.mappings.insert(m.iid());
        for (uint64_t id : m.path_string_ids())
          if (!s.paths.count(id)) bad.push_back(at + "mapping names an unknown path");
      }
      for (const auto& f : in.frames()) {
        s.frames.insert(f.iid());
        if (!s.names.count(f.function_name_id())) bad.push_back(at + "frame names an unknown function");
        if (!s.mappings.count(f.mapping_id())) bad.push_back(at + "frame names an unknown mapping");
      }
      for (const auto& c : in.callstacks()) {
        s.callstacks.insert(c.iid());
        if (c.frame_ids_size() == 0) bad.push_back(at + "empty callstack");
        for (uint64_t f : c.frame_ids())
          if (!s.frames.count(f)) bad.push_back(at + "callstack names an unknown frame");
      }
    }
    if (p.has_perf_sample()) {
      if (!needs || !s.cleared) bad.push_back(at + "sample without the sequence's incremental state");
      if (!s.callstacks.count(p.perf_sample().callstack_iid())) bad.push_back(at + "sample of an unknown callstack");
      if (!threads.count({static_cast<int32_t>(p.perf_sample().pid()), static_cast<int32_t>(p.perf_sample().tid())}))
        bad.push_back(at + "sample of a thread without a descriptor");
    }
    if (p.has_track_event()) {
      const auto& e = p.track_event();
      if (!tracks.count(e.track_uuid())) bad.push_back(at + "event on a track not described before");
      if (p.timestamp() < s.last_ts) bad.push_back(at + "time goes back within the sequence");
      s.last_ts = p.timestamp();
      if (e.type() == pp::TrackEvent::TYPE_SLICE_BEGIN) ++depth[e.track_uuid()];
      if (e.type() == pp::TrackEvent::TYPE_SLICE_END && --depth[e.track_uuid()] < 0)
        bad.push_back(at + "slice end without a begin");
    }
    if (bad.size() > 20) break;
  }
  for (const auto& [track, d] : depth)
    if (d != 0) bad.push_back("track " + std::to_string(track) + ": " + std::to_string(d) + " slices never end");
  return bad;
}

std::string export_trace(const std::string& recs, const std::string& out) {
  std::string log;
  EXPECT_EQ(run_command(kBin + " export " + recs + " --format perfetto -o " + out, &log), 0) << log;
  return log;
}

// Checks every trace the tests write the same way; returns the parsed trace.
pp::Trace check_trace(const std::string& path) {
  const Decoded d = decode_with_real_schema(path);
  EXPECT_EQ(d.rc, 0) << d.head;
  EXPECT_EQ(d.unknown, "") << "fields the real schema does not know";
  EXPECT_TRUE(d.has_clock_snapshot);
  pp::Trace t = parse(path);
  const auto bad = structural_problems(t);
  EXPECT_TRUE(bad.empty()) << bad.size() << " problems, first: " << bad.front();
  return t;
}

}  // namespace

TEST(PerfettoSchema, SyntheticGpuJobHasWallClockNamesFlameGraphsUnitsAndIncidents) {
  ASSERT_TRUE(std::filesystem::exists(kProtos)) << kProtos << " missing: the shared vendor folder sits beside the checkout";
  TempDir dir;
  const std::string rec = dir.file("gpu_job.sdb"), trace = dir.file("gpu_job.pftrace");
  SyntheticGpuJobOptions o;
  o.seconds = 90;
  o.launches_per_s = 200;
  o.torch_ops_per_s = 100;
  o.kernel_names = 30;
  o.cpus = 2;
  o.python_sample_hz = 49;
  o.loader_workers = 1;
  write_synthetic_gpu_job(rec, o);
  const std::string log = export_trace(rec, trace);
  EXPECT_NE(log.find(" incidents"), std::string::npos) << log;
  const pp::Trace t = check_trace(trace);

  // Wall clock: the snapshot ties MONOTONIC (the trace's clock) to REALTIME by the recording's offset.
  ASSERT_GT(t.packet_size(), 0);
  ASSERT_TRUE(t.packet(0).has_clock_snapshot());
  const auto& cs = t.packet(0).clock_snapshot();
  EXPECT_EQ(cs.primary_trace_clock(), static_cast<uint32_t>(pp::ClockSnapshot::Clock::MONOTONIC));
  std::map<uint32_t, uint64_t> clocks;
  for (const auto& c : cs.clocks()) clocks[c.clock_id()] = c.timestamp();
  const RecordingReader reader(rec);
  ASSERT_TRUE(clocks.count(pp::ClockSnapshot::Clock::REALTIME) && clocks.count(pp::ClockSnapshot::Clock::MONOTONIC));
  EXPECT_EQ(static_cast<int64_t>(clocks[pp::ClockSnapshot::Clock::REALTIME] - clocks[pp::ClockSnapshot::Clock::MONOTONIC]),
            reader.summary().realtime_offset_ns);

  std::map<uint64_t, const pp::TrackDescriptor*> tracks;
  std::set<std::string> process_names, thread_names, group_names;
  size_t counters = 0, counters_with_unit = 0, samples = 0, deep_stacks = 0, incident_slices = 0, markers = 0;
  uint64_t incident_track = 0;
  for (const auto& p : t.packet()) {
    if (p.has_track_descriptor()) {
      const auto& d = p.track_descriptor();
      tracks[d.uuid()] = &d;
      if (d.has_process()) process_names.insert(d.process().process_name());
      if (d.has_thread()) thread_names.insert(d.thread().thread_name());
      if (d.has_counter()) {
        ++counters;
        counters_with_unit += d.counter().has_unit_name();
        if (tracks.count(d.parent_uuid()) && !tracks[d.parent_uuid()]->has_process())
          group_names.insert(tracks[d.parent_uuid()]->name());
      }
      if (d.name().rfind("incidents [", 0) == 0) incident_track = d.uuid();
    }
    if (p.has_interned_data())
      for (const auto& c : p.interned_data().callstacks()) deep_stacks += c.frame_ids_size() >= 3;
    if (p.has_perf_sample()) ++samples;
    if (p.has_track_event()) {
      const auto& e = p.track_event();
      if (e.track_uuid() == incident_track && e.type() == pp::TrackEvent::TYPE_SLICE_BEGIN) {
        ++incident_slices;
        std::set<std::string> args;
        for (const auto& a : e.debug_annotations()) args.insert(a.name());
        EXPECT_TRUE(args.count("cause") && args.count("summary") && args.count("impact_s")) << e.name();
        EXPECT_GT(e.flow_ids_size(), 0) << "an incident links to the threads it hit";
      }
      if (e.name().rfind("incident #", 0) == 0) {
        ++markers;
        EXPECT_EQ(e.type(), pp::TrackEvent::TYPE_INSTANT);
        EXPECT_EQ(e.terminating_flow_ids_size(), 1);
      }
    }
  }
  // Names from the recording: the traced command, threads after their process.
  EXPECT_TRUE(process_names.count("python3")) << *process_names.begin();
  EXPECT_TRUE(thread_names.count("python3")) << *thread_names.begin();
  // Flame graphs: on-CPU Python stacks as samples of interned callstacks several frames deep.
  EXPECT_GT(samples, 1000u);
  EXPECT_GT(deep_stacks, 3u);
  // Counters in groups per subsystem and device, with their units.
  EXPECT_GT(counters, 20u);
  EXPECT_EQ(counters_with_unit, counters);
  EXPECT_TRUE(group_names.count("gpu gpu0")) << group_names.size();
  EXPECT_TRUE(group_names.count("cpu cpu0"));
  // Incidents: as many as analyze finds, each a slice with markers.
  std::string out;
  ASSERT_EQ(run_command(kBin + " analyze --no-store --json " + rec + " 2>/dev/null", &out), 0);
  const auto j = nlohmann::json::parse(out.substr(out.find('{')));
  EXPECT_EQ(incident_slices, j["recordings"][0]["incidents"].size());
  EXPECT_GT(incident_slices, 0u);
  EXPECT_GE(markers, incident_slices);
}

TEST(PerfettoSchema, MergedRanksAndNoIncidentsOptionStayValid) {
  ASSERT_TRUE(std::filesystem::exists(kProtos)) << kProtos;
  TempDir dir;
  std::string recs;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string rec = dir.file("rank" + std::to_string(rank) + ".sdb");
    SyntheticGpuJobOptions o;
    o.seconds = 10;
    o.seed = 1 + rank;
    o.launches_per_s = 200;
    o.torch_ops_per_s = 100;
    o.kernel_names = 10;
    o.cpus = 1;
    o.loader_workers = 1;
    write_synthetic_gpu_job(rec, o);
    recs += rec + " ";
  }
  const std::string merged = dir.file("merged.pftrace");
  export_trace(recs, merged);
  check_trace(merged);
  const std::string plain = dir.file("plain.pftrace");
  export_trace(recs + "--no-incidents", plain);
  const pp::Trace t = check_trace(plain);
  for (const auto& p : t.packet())
    if (p.has_track_descriptor()) {
      EXPECT_EQ(p.track_descriptor().name().rfind("incidents [", 0), std::string::npos);
    }
}

TEST(PerfettoSchema, RealCpuTrainingRecordingDecodes) {
  STACKSCOPE_REQUIRE(::geteuid() == 0, "needs root (eBPF layers)");
  STACKSCOPE_REQUIRE(run_command("/usr/bin/python3 -c 'import torch'") == 0, "python3-torch missing");
  ASSERT_TRUE(std::filesystem::exists(kProtos)) << kProtos;
  TempDir dir;
  const std::string rec = dir.file("cpu.sdb"), trace = dir.file("cpu.pftrace");
  std::string out;
  ASSERT_EQ(run_prioritised(dir, kBin + " record -q --layers host,python,kernel -o " + rec + " -- /usr/bin/python3 " +
                                     std::string(STACKSCOPE_SOURCE_DIR) + "/workloads/cpu_train.py --seconds 8\n",
                            &out),
            0)
      << out;
  export_trace(rec, trace);
  const pp::Trace t = check_trace(trace);
  size_t samples = 0;
  std::set<std::string> processes;
  for (const auto& p : t.packet()) {
    samples += p.has_perf_sample();
    if (p.has_track_descriptor() && p.track_descriptor().has_process())
      processes.insert(p.track_descriptor().process().process_name());
  }
  EXPECT_TRUE(processes.count("python3")) << "the recorded command names its process";
  // Python 3.11's stacks are sampled from eBPF by default: they arrive as callstack samples.
  const RecordingReader reader(rec);
  if (reader.summary().events_by_layer.count("python")) {
    EXPECT_GT(samples, 0u);
  }
}

// The real GPU recording (tests/data/gpu, 2 H200s): its export with the Python and NCCL layers and the GPU series
// decodes with the real schema and carries the incidents and the flame-graph samples.
TEST(PerfettoSchema, RealGpuRecordingHasIncidentsAndFlameGraphs) {
  ASSERT_TRUE(std::filesystem::exists(kProtos)) << kProtos << " missing: the shared vendor folder sits beside the checkout";
  TempDir dir;
  const std::string rec = dir.file("gpu.sdb"), trace = dir.file("gpu.pftrace");
  ASSERT_EQ(run_command("xz -dc " + std::string(STACKSCOPE_SOURCE_DIR) + "/tests/data/gpu/h200x2_cnn_ddp_s24.sdb.xz > " +
                        rec),
            0);
  std::string log;
  ASSERT_EQ(run_command(kBin + " export " + rec + " --format perfetto --layers python,nccl --series 'gpu.*' -o " + trace,
                        &log),
            0)
      << log;
  EXPECT_NE(log.find("2 incidents"), std::string::npos) << log;
  const pp::Trace t = check_trace(trace);
  size_t samples = 0, incident_slices = 0, nccl_slices = 0;
  uint64_t incident_track = 0;
  for (const auto& p : t.packet()) {
    if (p.has_track_descriptor() && p.track_descriptor().name().rfind("incidents [", 0) == 0)
      incident_track = p.track_descriptor().uuid();
    if (p.has_perf_sample()) ++samples;
    if (p.has_track_event() && p.track_event().type() == pp::TrackEvent::TYPE_SLICE_BEGIN) {
      incident_slices += p.track_event().track_uuid() == incident_track;
      nccl_slices += p.track_event().name().rfind("nccl", 0) == 0;
    }
  }
  EXPECT_EQ(incident_slices, 2u);
  EXPECT_GT(samples, 10000u) << "the flame graphs: Python stack samples";
  EXPECT_GT(nccl_slices, 1000u);
}
