// Exporters: write recordings with RecordingWriter, export them, parse the output back with the reading
// library of each format (libprotobuf for Perfetto, nlohmann-json for Chrome JSON) and check what came out.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "export/exporters.h"
#include "perfetto_trace.pb.h"
#include "store/recording_reader.h"
#include "store/recording_writer.h"
#include "test_util.h"

using namespace stackscope;

namespace {

constexpr int64_t kT0 = 1'000'000'000'000;  // 1000 s of monotonic time
constexpr int64_t kRank1ClockAhead = 1'000'000;  // rank 1's realtime offset is 1 ms larger

Event make_event(Layer layer, uint32_t pid, uint32_t tid, int64_t start, int64_t dur, std::string name,
                 uint8_t flags = kEventNone, std::vector<EventArg> args = {}) {
  Event e;
  e.layer = layer;
  e.pid = pid;
  e.tid = tid;
  e.start_ns = start;
  e.duration_ns = dur;
  e.name = std::move(name);
  e.flags = flags;
  e.args = std::move(args);
  return e;
}

// One rank: a python step containing a torch op containing a kernel launch, an NCCL allreduce (comm 0xabc,
// seq 7) and one that only this rank saw (seq 8 on rank 0), an instant, one slice overlapping another
// without nesting, and GPU series (one per process).
void write_rank(const std::string& path, int rank, int64_t offset) {
  RecordingWriter w(path);
  w.set_meta("clock.realtime_offset_ns", std::to_string(offset));
  w.set_meta("host", "node" + std::to_string(rank));
  w.set_meta("rank", std::to_string(rank));
  const uint32_t pid = 100, tid = 101;
  w.append_event(make_event(Layer::python, pid, tid, kT0, 10'000, "train_step"));
  w.append_event(make_event(Layer::torch, pid, tid, kT0 + 1'000, 5'000, "aten::linear"));
  w.append_event(make_event(Layer::cuda, pid, tid, kT0 + 2'000, 1'000, "cudaLaunchKernel", kEventHostEnqueue,
                            {{"kernel", std::string("gemm, \"big\"; k=v")}, {"grid_x", int64_t{128}}}));
  w.append_event(make_event(Layer::nccl, pid, tid, kT0 + 7'000 + rank * 500, 2'000, "ncclAllReduce",
                            kEventHostEnqueue,
                            {{"comm_hash", int64_t{0xabc}}, {"seq", int64_t{7}}, {"bytes", int64_t{1} << 20}}));
  if (rank == 0)
    w.append_event(make_event(Layer::nccl, pid, tid, kT0 + 20'000, 500, "ncclAllReduce", kEventHostEnqueue,
                              {{"comm_hash", int64_t{0xabc}}, {"seq", int64_t{8}}}));
  w.append_event(make_event(Layer::kernel, pid, tid, kT0 + 9'500, 0, "sched_switch", kEventInstant));
  // Starts inside train_step, ends after it: cannot nest on the thread's track.
  w.append_event(make_event(Layer::host, pid, tid, kT0 + 9'000, 3'000, "page_fault"));
  SeriesInfo util{0, "gpu.util", Subsystem::gpu, "ratio", SeriesKind::gauge, SeriesCategory::dynamic,
                  "node" + std::to_string(rank), "gpu0", "nvml"};
  SeriesInfo proc_mem{0, "gpu.proc.mem.used", Subsystem::gpu, "bytes", SeriesKind::gauge, SeriesCategory::dynamic,
                      "node" + std::to_string(rank), "gpu0/pid100", "nvml"};
  SeriesId a = w.add_series(util), b = w.add_series(proc_mem);
  for (int i = 0; i < 5; ++i) {
    Sample s[2] = {{a, kT0 + i * 100'000'000LL, 0.1 * i + rank}, {b, kT0 + i * 100'000'000LL, 1e9 + i}};
    w.append_samples(s);
  }
  w.close();
}

struct TwoRanks {
  TempDir dir;
  std::string r0 = dir.file("rank0.sdb"), r1 = dir.file("rank1.sdb");
  TwoRanks() {
    write_rank(r0, 0, 5'000'000'000);
    write_rank(r1, 1, 5'000'000'000 + kRank1ClockAhead);
  }
};

}  // namespace

TEST(Export, PerfettoTraceParsesWithTracksSlicesCountersAndCrossRankFlows) {
  TwoRanks t;
  RecordingReader a(t.r0), b(t.r1);
  std::ostringstream out;
  ExportCounts c = export_perfetto({&a, &b}, {}, out);

  perfetto::protos::Trace trace;
  ASSERT_TRUE(trace.ParseFromString(out.str()));
  std::map<uint64_t, const perfetto::protos::TrackDescriptor*> tracks;
  std::set<int32_t> process_pids;
  std::map<uint32_t, bool> sequence_started;
  int begins = 0, ends = 0, instants = 0, counters = 0;
  std::map<uint64_t, std::vector<uint64_t>> flow_ts;
  std::map<uint64_t, std::vector<std::pair<int, uint64_t>>> per_track;  // (+1 begin / -1 end, ts)
  std::map<std::string, std::vector<uint64_t>> begin_ts_by_name;
  for (auto& p : trace.packet()) {
    ASSERT_TRUE(p.has_trusted_packet_sequence_id());
    if (p.has_clock_snapshot()) continue;  // the wall clock, on a sequence of its own
    uint32_t seq = p.trusted_packet_sequence_id();
    if (!sequence_started[seq]) {
      EXPECT_EQ(p.sequence_flags(), perfetto::protos::TracePacket::SEQ_INCREMENTAL_STATE_CLEARED);
      sequence_started[seq] = true;
    }
    if (p.has_track_descriptor()) {
      auto& d = p.track_descriptor();
      EXPECT_TRUE(tracks.emplace(d.uuid(), &d).second) << "duplicate uuid";
      if (d.has_process()) {
        EXPECT_TRUE(process_pids.insert(d.process().pid()).second) << "pid collision";
      }
      continue;
    }
    ASSERT_TRUE(p.has_track_event());
    auto& te = p.track_event();
    ASSERT_TRUE(tracks.count(te.track_uuid())) << "event before its track descriptor";
    switch (te.type()) {
      case perfetto::protos::TrackEvent::TYPE_SLICE_BEGIN:
        ++begins;
        per_track[te.track_uuid()].push_back({+1, p.timestamp()});
        begin_ts_by_name[te.name()].push_back(p.timestamp());
        for (auto id : te.flow_ids()) flow_ts[id].push_back(p.timestamp());
        if (te.name().find("ncclAllReduce") != std::string::npos || te.name().find("cudaLaunch") != std::string::npos) {
          EXPECT_NE(te.name().find("(enqueue)"), std::string::npos) << te.name();
          EXPECT_EQ(te.categories_size(), 2);
          EXPECT_EQ(te.categories(1), "enqueue");
        }
        break;
      case perfetto::protos::TrackEvent::TYPE_SLICE_END:
        ++ends;
        per_track[te.track_uuid()].push_back({-1, p.timestamp()});
        break;
      case perfetto::protos::TrackEvent::TYPE_INSTANT:
        ++instants;
        break;
      case perfetto::protos::TrackEvent::TYPE_COUNTER:
        ++counters;
        EXPECT_TRUE(tracks.at(te.track_uuid())->has_counter());
        EXPECT_TRUE(te.has_double_counter_value());
        break;
      default:
        ADD_FAILURE() << "unexpected event type";
    }
  }
  // rank 0: 6 slices + 1 instant; rank 1: 5 slices + 1 instant; 2 series x 5 points per rank.
  EXPECT_EQ(begins, 11);
  EXPECT_EQ(ends, 11);
  EXPECT_EQ(instants, 2);
  EXPECT_EQ(counters, 20);
  EXPECT_EQ(c.slices, 11u);
  EXPECT_EQ(c.counter_points, 20u);
  EXPECT_EQ(c.counter_tracks, 4u);
  // Same pid on both hosts: the merged trace keeps them apart.
  EXPECT_GE(process_pids.size(), 4u);  // two traced processes + two telemetry processes
  // Each track's BEGIN/END are balanced and never close before they open.
  for (auto& [uuid, seq] : per_track) {
    int depth = 0;
    for (auto [d, ts] : seq) {
      depth += d;
      ASSERT_GE(depth, 0) << "END without BEGIN on track " << uuid;
    }
    EXPECT_EQ(depth, 0);
  }
  // page_fault overlaps train_step without nesting: it is on an overflow track, not the thread's.
  int overlap_tracks = 0;
  for (auto& [uuid, d] : tracks) overlap_tracks += d->name().find("overlap") != std::string::npos;
  EXPECT_EQ(overlap_tracks, 2);
  // One flow: the seq-7 allreduce on both ranks; seq 8 (rank 0 only) has no partner and no flow.
  ASSERT_EQ(flow_ts.size(), 1u);
  ASSERT_EQ(flow_ts.begin()->second.size(), 2u);
  EXPECT_EQ(c.flows, 1u);
  // Clock alignment: rank 1's events move by the realtime-offset difference.
  auto& steps = begin_ts_by_name["train_step"];
  ASSERT_EQ(steps.size(), 2u);
  std::sort(steps.begin(), steps.end());
  EXPECT_EQ(steps[0], static_cast<uint64_t>(kT0));
  EXPECT_EQ(steps[1], static_cast<uint64_t>(kT0 + kRank1ClockAhead));
  auto flow = flow_ts.begin()->second;
  std::sort(flow.begin(), flow.end());
  EXPECT_EQ(flow[0], static_cast<uint64_t>(kT0 + 7'000));
  EXPECT_EQ(flow[1], static_cast<uint64_t>(kT0 + 7'500 + kRank1ClockAhead));
}

TEST(Export, PerfettoSingleRecordingKeepsPidsAndTimestamps) {
  TwoRanks t;
  RecordingReader a(t.r0);
  std::ostringstream out;
  ExportOptions o;
  o.layers = {Layer::python, Layer::nccl};
  o.series_pattern = "gpu.util";
  export_perfetto({&a}, o, out);
  perfetto::protos::Trace trace;
  ASSERT_TRUE(trace.ParseFromString(out.str()));
  int begins = 0, counters = 0, threads = 0;
  for (auto& p : trace.packet()) {
    if (p.has_track_descriptor() && p.track_descriptor().has_thread()) {
      EXPECT_EQ(p.track_descriptor().thread().pid(), 100);
      EXPECT_EQ(p.track_descriptor().thread().tid(), 101);
      ++threads;
    }
    if (!p.has_track_event()) continue;
    if (p.track_event().type() == perfetto::protos::TrackEvent::TYPE_SLICE_BEGIN) {
      ++begins;
      if (p.track_event().name() == "train_step") {
        EXPECT_EQ(p.timestamp(), static_cast<uint64_t>(kT0));
      }
    }
    counters += p.track_event().type() == perfetto::protos::TrackEvent::TYPE_COUNTER;
  }
  EXPECT_EQ(threads, 1);
  EXPECT_EQ(begins, 3);    // train_step + 2 allreduces
  EXPECT_EQ(counters, 5);  // gpu.util only
}

TEST(Export, ChromeJsonParsesWithSlicesCountersFlowsAndMetadata) {
  TwoRanks t;
  RecordingReader a(t.r0), b(t.r1);
  std::ostringstream out;
  export_chrome_json({&a, &b}, {}, out);
  nlohmann::json j = nlohmann::json::parse(out.str());
  std::map<std::string, int> by_ph;
  std::set<std::string> flow_ids;
  for (auto& e : j.at("traceEvents")) {
    by_ph[e.at("ph").get<std::string>()]++;
    if (e["ph"] == "X") {
      EXPECT_GE(e.at("dur").get<double>(), 0.0);
      if (e["name"] == "cudaLaunchKernel (enqueue)") {
        EXPECT_EQ(e["cat"], "cuda,enqueue");
        EXPECT_EQ(e["args"]["grid_x"], 128);
      }
      if (e["name"] == "train_step") {
        double ts = e["ts"].get<double>();
        EXPECT_TRUE(ts == kT0 / 1000.0 || ts == (kT0 + kRank1ClockAhead) / 1000.0) << ts;
      }
    }
    if (e["ph"] == "s" || e["ph"] == "f") flow_ids.insert(e["id"].get<std::string>());
    if (e["ph"] == "C") {
      EXPECT_TRUE(e["args"]["value"].is_number());
    }
  }
  EXPECT_EQ(by_ph["X"], 11);
  EXPECT_EQ(by_ph["i"], 2);
  EXPECT_EQ(by_ph["C"], 20);
  EXPECT_EQ(by_ph["s"], 1);
  EXPECT_EQ(by_ph["f"], 1);
  EXPECT_EQ(flow_ids.size(), 1u);
  EXPECT_GE(by_ph["M"], 6);  // process and thread names
}

TEST(Export, CsvEventsAndSamplesRoundTripValues) {
  TwoRanks t;
  RecordingReader a(t.r0);
  std::ostringstream ev, sa;
  EXPECT_EQ(export_csv_events(a, {}, ev).rows, 7u);
  std::string text = ev.str();
  EXPECT_EQ(text.substr(0, text.find('\n')), "layer,name,pid,tid,start_ns,duration_ns,flags,args");
  // The kernel name holds ',', '"', ';' and '=': escaped for args, then quoted for CSV.
  EXPECT_NE(text.find("cuda,cudaLaunchKernel,100,101,1000000002000,1000,enqueue,"
                      "\"kernel=gemm, \"\"big\"\"\\; k\\=v;grid_x=128\""),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("kernel,sched_switch,100,101,1000000009500,0,instant,\n"), std::string::npos);
  ExportOptions o;
  o.series_pattern = "gpu.util*";
  EXPECT_EQ(export_csv_samples(a, o, sa).rows, 5u);
  std::istringstream lines(sa.str());
  std::string line;
  std::getline(lines, line);
  EXPECT_EQ(line, "series,host,subsystem,unit,kind,source,t_ns,value");
  std::getline(lines, line);
  EXPECT_EQ(line, "gpu.util{gpu0},node0,gpu,ratio,gauge,nvml,1000000000000,0");
  std::getline(lines, line);
  EXPECT_EQ(line, "gpu.util{gpu0},node0,gpu,ratio,gauge,nvml,1000100000000,0.1");
}

TEST(Export, CliWritesFilesAndRejectsBadInput) {
  TwoRanks t;
  std::string out;
  std::string bin = STACKSCOPE_BIN;
  std::string trace = t.dir.file("job.perfetto-trace");
  ASSERT_EQ(run_command(bin + " export " + t.r0 + " " + t.r1 + " --format perfetto -o " + trace, &out), 0) << out;
  perfetto::protos::Trace parsed;
  EXPECT_TRUE(parsed.ParseFromString(read_file(trace)));
  EXPECT_GT(parsed.packet_size(), 30);
  EXPECT_NE(out.find("1 flows"), std::string::npos) << out;

  ASSERT_EQ(run_command(bin + " export " + t.r0 + " --format csv --what both -q -o " + t.dir.file("r0"), &out), 0)
      << out;
  EXPECT_NE(read_file(t.dir.file("r0.events.csv")).find("ncclAllReduce"), std::string::npos);
  EXPECT_NE(read_file(t.dir.file("r0.samples.csv")).find("gpu.proc.mem.used{gpu0/pid100}"), std::string::npos);

  ASSERT_EQ(run_command(bin + " export " + t.r0 + " --format chrome-json -q -o " + t.dir.file("r0.json"), &out), 0);
  EXPECT_TRUE(nlohmann::json::parse(read_file(t.dir.file("r0.json"))).contains("traceEvents"));

  // Two recordings to CSV, a junk file, an unknown layer: each a clear error and exit 1.
  EXPECT_EQ(run_command(bin + " export " + t.r0 + " " + t.r1 + " --format csv", &out), 1);
  EXPECT_NE(out.find("csv takes one recording"), std::string::npos) << out;
  std::string junk = t.dir.file("junk.sdb");
  write_file(junk, std::string(4096, 'x'));
  EXPECT_EQ(run_command(bin + " export " + junk + " --format chrome-json", &out), 1);
  EXPECT_NE(out.find(junk), std::string::npos) << out;
  EXPECT_EQ(run_command(bin + " export " + t.r0 + " --format csv --layers cuda,gpu", &out), 1);
  EXPECT_NE(out.find("unknown layer 'gpu'"), std::string::npos) << out;
}

// The uprobe tracer records only the rank-local communicator address: collectives are matched by the
// communicator's creation order and the per-communicator call count, here two ranks in one recording.
TEST(Export, DerivesCollectiveFlowsFromCommunicatorAddresses) {
  TempDir dir;
  std::string path = dir.file("node.sdb");
  {
    RecordingWriter w(path);
    for (uint32_t rank = 0; rank < 2; ++rank) {
      uint32_t pid = 300 + rank;
      int64_t world = 0x7000 + rank * 0x100, sub = 0x9000 + rank * 0x100;  // addresses differ per rank
      int64_t t = kT0 + rank * 50;
      w.append_event(make_event(Layer::nccl, pid, pid, t, 100, "ncclCommInitRank", kEventNone,
                                {{"comm", world}, {"nranks", int64_t{2}}, {"rank", int64_t{rank}}}));
      w.append_event(make_event(Layer::nccl, pid, pid, t + 200, 100, "ncclCommSplit", kEventNone,
                                {{"comm", world}, {"new_comm", sub}}));
      // Rank 1 uses the sub-communicator first: creation order, not first use, names it.
      for (int k = 0; k < 3; ++k) {
        int64_t comm = (k == 1) ? sub : world;
        w.append_event(make_event(Layer::nccl, pid, pid, t + 1'000 * (k + 1) + (rank && k == 1 ? -900 : 0), 50,
                                  "ncclAllReduce", kEventHostEnqueue, {{"comm", comm}}));
      }
    }
    w.close();
  }
  RecordingReader r(path);
  Timeline tl = build_timeline({&r}, {});
  std::map<uint64_t, std::vector<std::pair<uint32_t, int64_t>>> by_flow;  // flow -> (pid, start)
  for (auto& th : tl.recordings[0].threads)
    for (size_t n = 0; n < th.events.size(); ++n)
      if (th.flow_ids[n]) by_flow[th.flow_ids[n]].push_back({th.pid, th.events[n].start_ns});
  ASSERT_EQ(by_flow.size(), 3u);
  for (auto& [id, members] : by_flow) {
    ASSERT_EQ(members.size(), 2u);
    EXPECT_NE(members[0].first, members[1].first);  // one event per rank
  }
  std::ostringstream out;
  EXPECT_EQ(export_perfetto({&r}, {}, out).flows, 3u);
}

// Derived series (rates of counters, here) come after the recorded ones, marked source "derived".
TEST(Export, CsvSamplesIncludeDerivedSeries) {
  TempDir dir;
  std::string path = dir.file("net.sdb");
  {
    RecordingWriter w(path);
    SeriesInfo rx{0, "net.rx.bytes", Subsystem::network, "bytes", SeriesKind::counter, SeriesCategory::dynamic,
                  "h", "eth0", "procfs"};
    SeriesId id = w.add_series(rx);
    for (int i = 0; i < 10; ++i) {
      Sample s{id, kT0 + i * 1'000'000'000LL, 1000.0 * i};
      w.append_samples({&s, 1});
    }
    w.close();
  }
  RecordingReader r(path);
  std::ostringstream with, without;
  export_csv_samples(r, {}, with);
  ExportOptions raw_only;
  raw_only.derived = false;
  EXPECT_EQ(export_csv_samples(r, raw_only, without).rows, 10u);
  EXPECT_EQ(without.str().find(",derived,"), std::string::npos);
  std::istringstream lines(with.str());
  std::string line;
  int derived = 0;
  while (std::getline(lines, line))
    if (line.find(",derived,") != std::string::npos) {
      ++derived;
      EXPECT_EQ(line.rfind("net.rx.bytes.rate{eth0},h,network,", 0), 0u) << line;
    }
  EXPECT_GT(derived, 0);
}
