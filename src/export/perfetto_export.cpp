#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>

#include <google/protobuf/wire_format_lite.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <unordered_map>

#include "export/exporters.h"
#include "perfetto_trace.pb.h"

namespace stackscope {

namespace {
namespace pp = perfetto::protos;

constexpr uint32_t kTraceFieldPacket = 1;  // Trace.packet
constexpr uint32_t kClockSequence = 0x7fff0000u;  // the clock snapshot's own sequence
constexpr size_t kMaxIncidentMarkers = 32;  // threads marked per incident

// A packet waiting to be written, ordered by timestamp within its sequence.
struct Pending {
  int64_t ts;
  uint64_t order;
  pp::TracePacket packet;
};

class PacketWriter {
 public:
  explicit PacketWriter(std::ostream& out) : zs_(&out), cs_(&zs_) {}
  // Trace is `repeated TracePacket packet = 1`: a concatenation of length-delimited field-1 records.
  void write(const pp::TracePacket& p) {
    cs_.WriteTag(google::protobuf::internal::WireFormatLite::MakeTag(
        kTraceFieldPacket, google::protobuf::internal::WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
    cs_.WriteVarint32(static_cast<uint32_t>(p.ByteSizeLong()));
    p.SerializeWithCachedSizes(&cs_);
  }

 private:
  google::protobuf::io::OstreamOutputStream zs_;
  google::protobuf::io::CodedOutputStream cs_;
};

void add_annotations(pp::TrackEvent* te, const Event& e) {
  for (auto& a : e.args) {
    auto* d = te->add_debug_annotations();
    d->set_name(a.key);
    if (auto* i = std::get_if<int64_t>(&a.value)) d->set_int_value(*i);
    else if (auto* x = std::get_if<double>(&a.value)) d->set_double_value(*x);
    else d->set_string_value(std::get<std::string>(a.value));
  }
}

pp::DebugAnnotation* annotate(pp::TrackEvent* te, const std::string& name) {
  auto* d = te->add_debug_annotations();
  d->set_name(name);
  return d;
}

pp::CounterDescriptor::Unit counter_unit(const std::string& unit) {
  if (unit == "bytes") return pp::CounterDescriptor::UNIT_SIZE_BYTES;
  if (unit == "ns") return pp::CounterDescriptor::UNIT_TIME_NS;
  if (unit == "count") return pp::CounterDescriptor::UNIT_COUNT;
  return pp::CounterDescriptor::UNIT_UNSPECIFIED;
}

// Interned function names, frames and callstacks of one sequence (Perfetto's InternedData): each Python
// qualified name is one function and one frame (rel_pc = the frame's iid, so that frames stay distinct within
// the one synthetic mapping), each distinct stack one callstack.
class StackInterner {
 public:
  uint64_t callstack(const std::string& folded) {
    auto [it, fresh] = callstacks_.try_emplace(folded, callstacks_.size() + 1);
    if (!fresh) return it->second;
    auto* cs = data_.add_callstacks();
    cs->set_iid(it->second);
    size_t i = 0;
    while (i <= folded.size()) {
      size_t j = folded.find(';', i);
      if (j == std::string::npos) j = folded.size();
      if (j > i) cs->add_frame_ids(frame(folded.substr(i, j - i)));
      i = j + 1;
    }
    return it->second;
  }
  bool empty() const { return callstacks_.empty(); }
  // The interned data to emit once, before the first sample of the sequence.
  pp::InternedData take() {
    auto* path = data_.add_mapping_paths();
    path->set_iid(1);
    path->set_str("python (stackscope stack sampler)");
    auto* build = data_.add_build_ids();
    build->set_iid(1);
    build->set_str("");
    auto* m = data_.add_mappings();
    m->set_iid(kMapping);
    m->set_build_id(1);
    m->set_start(0);
    m->set_end(frames_.size() + 1);
    m->add_path_string_ids(1);
    return std::move(data_);
  }

 private:
  static constexpr uint64_t kMapping = 1;
  uint64_t frame(const std::string& function) {
    auto [it, fresh] = frames_.try_emplace(function, frames_.size() + 1);
    if (fresh) {
      auto* name = data_.add_function_names();
      name->set_iid(it->second);
      name->set_str(function);
      auto* f = data_.add_frames();
      f->set_iid(it->second);
      f->set_function_name_id(it->second);
      f->set_mapping_id(kMapping);
      f->set_rel_pc(it->second);
    }
    return it->second;
  }
  pp::InternedData data_;
  std::unordered_map<std::string, uint64_t> callstacks_, frames_;
};

std::string stack_of(const Event& e) {
  const ArgValue* v = e.arg("stack");
  const auto* s = v ? std::get_if<std::string>(v) : nullptr;
  return s ? *s : e.name;
}

// As `analyze` prints it: past a thousand deviations the figure only says the baseline was flat.
std::string evidence_text(const IncidentEvidence& e) {
  const std::string dev = std::abs(e.z) > 1000 ? (e.z > 0 ? "far above a flat baseline" : "far below a flat baseline")
                                                : fmt::format("{:+.1f} sd", e.z);
  return fmt::format("{} ({}): {:.4g} -> {:.4g} {} ({})", e.metric, e.layer, e.expected, e.observed, e.unit, dev);
}

std::string culprit_text(const Culprit& c) {
  if (!c.pid || c.name == fmt::format("pid {}", *c.pid)) return c.kind + " " + c.name;
  return fmt::format("{} {} (pid {})", c.kind, c.name, *c.pid);
}
}  // namespace

ExportCounts export_perfetto(const std::vector<const RecordingReader*>& recordings, const ExportOptions& options,
                             std::ostream& out) {
  ExportOptions opts = options;
  opts.split_stack_samples = true;
  Timeline tl = build_timeline(recordings, opts);
  ExportCounts counts;
  PacketWriter writer(out);
  uint64_t next_uuid = 1;

  // Wall clock: timestamps are recording 0's CLOCK_MONOTONIC (shifted); the snapshot ties them to CLOCK_REALTIME
  // and makes MONOTONIC the trace's clock, so the UI can show UTC.
  {
    const auto& r0 = tl.recordings.front();
    const int64_t t = std::max<int64_t>(r0.shift_ns, 0);
    pp::TracePacket p;
    p.set_trusted_packet_sequence_id(kClockSequence);
    auto* cs = p.mutable_clock_snapshot();
    auto* mono = cs->add_clocks();
    mono->set_clock_id(pp::ClockSnapshot::Clock::MONOTONIC);
    mono->set_timestamp(static_cast<uint64_t>(t));
    auto* real = cs->add_clocks();
    real->set_clock_id(pp::ClockSnapshot::Clock::REALTIME);
    real->set_timestamp(static_cast<uint64_t>(t - r0.shift_ns + r0.realtime_offset_ns));
    cs->set_primary_trace_clock(pp::ClockSnapshot::Clock::MONOTONIC);
    writer.write(p);
  }

  for (size_t ri = 0; ri < tl.recordings.size(); ++ri) {
    auto& rec = tl.recordings[ri];
    const uint32_t seq = static_cast<uint32_t>(ri + 1);
    bool first = true;
    auto descriptor = [&](const std::function<void(pp::TrackDescriptor*)>& fill) {
      pp::TracePacket p;
      p.set_trusted_packet_sequence_id(seq);
      if (first) p.set_sequence_flags(pp::TracePacket::SEQ_INCREMENTAL_STATE_CLEARED);
      first = false;
      fill(p.mutable_track_descriptor());
      writer.write(p);
    };

    // Tracks: processes, their threads (and overflow lanes), then counters.
    std::map<uint32_t, uint64_t> process_uuid;
    for (const auto& entry : rec.processes) {  // no structured binding: the lambda below captures it (clang 14)
      const TimelineProcess& proc = entry.second;
      uint64_t u = next_uuid++;
      process_uuid[entry.first] = u;
      descriptor([&](pp::TrackDescriptor* d) {
        d->set_uuid(u);
        d->mutable_process()->set_pid(static_cast<int32_t>(proc.out_pid));
        d->mutable_process()->set_process_name(proc.name);
        for (const auto& w : proc.cmdline) d->mutable_process()->add_cmdline(w);
      });
    }
    std::map<std::pair<uint32_t, uint32_t>, uint64_t> thread_uuid;
    std::vector<uint64_t> lane_uuid(rec.threads.size());
    for (size_t k = 0; k < rec.threads.size(); ++k) {
      auto& th = rec.threads[k];
      uint64_t u = next_uuid++;
      lane_uuid[k] = u;
      if (th.lane == 0) {
        thread_uuid[{th.pid, th.tid}] = u;
        descriptor([&](pp::TrackDescriptor* d) {
          d->set_uuid(u);
          d->set_parent_uuid(process_uuid[th.pid]);
          d->mutable_thread()->set_pid(static_cast<int32_t>(th.out_pid));
          d->mutable_thread()->set_tid(static_cast<int32_t>(th.out_tid));
          d->mutable_thread()->set_thread_name(th.name.empty() ? "tid " + std::to_string(th.tid) : th.name);
        });
      } else {
        // Slices that overlap without nesting go to a child track of the process, named after the thread.
        descriptor([&](pp::TrackDescriptor* d) {
          d->set_uuid(u);
          d->set_parent_uuid(process_uuid[th.pid]);
          d->set_name("tid " + std::to_string(th.tid) + " overlap " + std::to_string(th.lane));
        });
      }
    }
    // Counters: recording-wide series under one "telemetry" process, in a group per subsystem and device
    // ("gpu gpu0", "cpu cpu3"); per-process series ("gpu0/pid1234") under their process.
    uint64_t telemetry_uuid = 0;
    std::map<std::string, uint64_t> group_uuid;
    std::vector<uint64_t> counter_uuid(rec.series.size());
    for (size_t k = 0; k < rec.series.size(); ++k) {
      auto& s = rec.series[k];
      uint64_t parent = 0;
      if (s.out_pid) {
        for (auto& [pid, proc] : rec.processes)
          if (proc.out_pid == s.out_pid) parent = process_uuid[pid];
      }
      const bool per_process = parent != 0;
      if (!parent) {
        if (!telemetry_uuid) {
          telemetry_uuid = next_uuid++;
          descriptor([&](pp::TrackDescriptor* d) {
            d->set_uuid(telemetry_uuid);
            d->mutable_process()->set_pid(static_cast<int32_t>(rec.telemetry_pid));
            d->mutable_process()->set_process_name("telemetry [" + rec.label + "]");
          });
        }
        const std::string group = std::string(subsystem_name(s.info.subsystem)) +
                                  (s.info.device.empty() ? "" : " " + s.info.device);
        auto [it, fresh] = group_uuid.try_emplace(group, 0);
        if (fresh) {
          it->second = next_uuid++;
          const uint64_t g = it->second;
          descriptor([&](pp::TrackDescriptor* d) {
            d->set_uuid(g);
            d->set_parent_uuid(telemetry_uuid);
            d->set_name(group);
          });
        }
        parent = it->second;
      }
      uint64_t u = next_uuid++;
      counter_uuid[k] = u;
      ++counts.counter_tracks;
      descriptor([&](pp::TrackDescriptor* d) {
        d->set_uuid(u);
        d->set_parent_uuid(parent);
        // Inside a device group the device is already said; a per-process series keeps its full key.
        std::string name = per_process || s.info.device.empty() ? s.info.key() : s.info.name;
        if (s.info.source == "derived") name += " (derived)";
        d->set_name(name);
        auto* c = d->mutable_counter();
        c->add_categories(std::string(subsystem_name(s.info.subsystem)));
        c->set_unit(counter_unit(s.info.unit));
        if (!s.info.unit.empty()) c->set_unit_name(s.info.unit);
      });
    }
    // Incidents: a track of their own (a top-level track named after the recording).
    uint64_t incident_track = 0;
    if (!rec.incidents.empty()) {
      incident_track = next_uuid++;
      descriptor([&](pp::TrackDescriptor* d) {
        d->set_uuid(incident_track);
        d->set_name("incidents [" + rec.label + "]");
        d->set_description("Episodes where the job made less progress than its steady pace (stackscope analyze), "
                           "with their root cause and evidence");
      });
    }

    // Python stack samples: interned once for the sequence, before any sample.
    StackInterner interner;
    std::vector<std::vector<uint64_t>> sample_stacks(rec.threads.size());
    for (size_t k = 0; k < rec.threads.size(); ++k)
      for (const Event& e : rec.threads[k].stack_samples) sample_stacks[k].push_back(interner.callstack(stack_of(e)));
    if (!interner.empty()) {
      pp::TracePacket p;
      p.set_trusted_packet_sequence_id(seq);
      p.set_sequence_flags(pp::TracePacket::SEQ_NEEDS_INCREMENTAL_STATE);
      *p.mutable_interned_data() = interner.take();
      writer.write(p);
    }

    // Events of this sequence, in timestamp order; per track BEGIN/END come out properly nested because
    // each lane is walked with a stack of open slices before the stable merge by time.
    std::vector<Pending> pending;
    uint64_t order = 0;
    auto make_packet = [&](int64_t ts) -> pp::TracePacket& {
      pending.push_back({ts, order++, {}});
      auto& p = pending.back().packet;
      p.set_timestamp(static_cast<uint64_t>(ts));
      p.set_trusted_packet_sequence_id(seq);
      return p;
    };
    auto make = [&](int64_t ts, uint64_t track) -> pp::TrackEvent* {
      auto* te = make_packet(ts).mutable_track_event();
      te->set_track_uuid(track);
      return te;
    };
    for (size_t k = 0; k < rec.threads.size(); ++k) {
      uint64_t track = lane_uuid[k];
      std::vector<int64_t> open;
      auto close_until = [&](int64_t t) {
        while (!open.empty() && open.back() <= t) {
          make(open.back(), track)->set_type(pp::TrackEvent::TYPE_SLICE_END);
          open.pop_back();
        }
      };
      auto& th = rec.threads[k];
      for (size_t n = 0; n < th.events.size(); ++n) {
        auto& e = th.events[n];
        close_until(e.start_ns);
        bool instant = e.flags & kEventInstant;
        auto* te = make(e.start_ns, track);
        te->set_type(instant ? pp::TrackEvent::TYPE_INSTANT : pp::TrackEvent::TYPE_SLICE_BEGIN);
        te->set_name(event_display_name(e));
        for (auto& c : event_categories(e)) te->add_categories(c);
        add_annotations(te, e);
        if (uint64_t id = th.flow_ids[n]; id && tl.flow_counts[id] >= 2) te->add_flow_ids(id);
        if (instant) {
          ++counts.instants;
        } else {
          ++counts.slices;
          open.push_back(e.start_ns + std::max<int64_t>(e.duration_ns, 0));
        }
      }
      close_until(INT64_MAX);
      for (size_t n = 0; n < th.stack_samples.size(); ++n) {
        auto& p = make_packet(th.stack_samples[n].start_ns);
        p.set_sequence_flags(pp::TracePacket::SEQ_NEEDS_INCREMENTAL_STATE);
        auto* s = p.mutable_perf_sample();
        s->set_pid(th.out_pid);
        s->set_tid(th.out_tid);
        s->set_callstack_iid(sample_stacks[k][n]);
        ++counts.stack_samples;
      }
    }
    for (size_t k = 0; k < rec.series.size(); ++k) {
      auto& s = rec.series[k];
      for (size_t j = 0; j < s.t_ns.size(); ++j) {
        auto* te = make(s.t_ns[j], counter_uuid[k]);
        te->set_type(pp::TrackEvent::TYPE_COUNTER);
        te->set_double_counter_value(s.values[j]);
        ++counts.counter_points;
      }
    }
    // Incidents: one slice each on the incidents track, with the cause, its evidence and culprits as arguments,
    // and a flow to an instant marker at the incident's start on each thread that was busy during it (the job's
    // threads) and on each culprit process that has a track.
    uint64_t next_incident_flow = (static_cast<uint64_t>(seq) << 40) | (1ull << 62);
    std::vector<Incident> by_start = rec.incidents;  // disjoint episodes: by start, their slices nest trivially
    std::sort(by_start.begin(), by_start.end(), [](const Incident& a, const Incident& b) { return a.start_ns < b.start_ns; });
    for (const Incident& inc : by_start) {
      const std::string title = fmt::format("#{} {}", inc.id, cause_class_name(inc.cause.cls));
      std::vector<uint64_t> marker_tracks;
      for (size_t k = 0; k < rec.threads.size() && marker_tracks.size() < kMaxIncidentMarkers; ++k) {
        const auto& th = rec.threads[k];
        if (th.lane != 0) continue;
        const bool busy = std::any_of(th.events.begin(), th.events.end(), [&](const Event& e) {
          return e.start_ns < inc.end_ns && e.start_ns + std::max<int64_t>(e.duration_ns, 0) >= inc.start_ns;
        }) || std::any_of(th.stack_samples.begin(), th.stack_samples.end(), [&](const Event& e) {
          return e.start_ns >= inc.start_ns && e.start_ns < inc.end_ns;
        });
        if (busy) marker_tracks.push_back(lane_uuid[k]);
      }
      for (const Culprit& c : inc.cause.culprits)
        if (c.pid)
          if (auto it = process_uuid.find(static_cast<uint32_t>(*c.pid)); it != process_uuid.end())
            marker_tracks.push_back(it->second);
      auto* te = make(inc.start_ns, incident_track);
      te->set_type(pp::TrackEvent::TYPE_SLICE_BEGIN);
      te->set_name(title);
      te->add_categories("incident");
      annotate(te, "cause")->set_string_value(std::string(cause_class_name(inc.cause.cls)));
      annotate(te, "confidence")->set_double_value(inc.cause.confidence);
      annotate(te, "impact_s")->set_double_value(inc.impact_s);
      annotate(te, "summary")->set_string_value(inc.summary);
      annotate(te, "symptom")->set_string_value(fmt::format("{}: {:.4g} -> {:.4g} {}", inc.symptom.metric,
                                                            inc.symptom.expected, inc.symptom.observed, inc.symptom.unit));
      if (!inc.cause.evidence.empty()) {
        auto* ev = annotate(te, "evidence");
        for (const IncidentEvidence& e : inc.cause.evidence) ev->add_array_values()->set_string_value(evidence_text(e));
      }
      if (!inc.cause.culprits.empty()) {
        auto* cu = annotate(te, "culprits");
        for (const Culprit& c : inc.cause.culprits)
          cu->add_array_values()->set_string_value(culprit_text(c));
      }
      std::string layers;
      for (const auto& l : inc.layers) layers += (layers.empty() ? "" : ",") + l;
      if (!layers.empty()) annotate(te, "layers")->set_string_value(layers);
      for (uint64_t track : marker_tracks) {
        const uint64_t flow = next_incident_flow++;
        te->add_flow_ids(flow);
        auto* m = make(inc.start_ns, track);
        m->set_type(pp::TrackEvent::TYPE_INSTANT);
        m->set_name("incident " + title);
        m->add_categories("incident");
        m->add_terminating_flow_ids(flow);
        ++counts.instants;
      }
      make(std::max(inc.end_ns, inc.start_ns), incident_track)->set_type(pp::TrackEvent::TYPE_SLICE_END);
      ++counts.incidents;
    }
    std::stable_sort(pending.begin(), pending.end(),
                     [](const Pending& a, const Pending& b) { return a.ts < b.ts; });
    for (auto& p : pending) writer.write(p.packet);
  }
  for (auto& [id, n] : tl.flow_counts) counts.flows += n >= 2;
  return counts;
}

}  // namespace stackscope
