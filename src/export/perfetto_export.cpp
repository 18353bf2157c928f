#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>

#include <google/protobuf/wire_format_lite.h>

#include <algorithm>
#include <functional>
#include <map>

#include "export/exporters.h"
#include "perfetto_trace.pb.h"

namespace stackscope {

namespace {
namespace pp = perfetto::protos;

constexpr uint32_t kTraceFieldPacket = 1;  // Trace.packet

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

pp::CounterDescriptor::Unit counter_unit(const std::string& unit) {
  if (unit == "bytes") return pp::CounterDescriptor::UNIT_SIZE_BYTES;
  if (unit == "ns") return pp::CounterDescriptor::UNIT_TIME_NS;
  if (unit == "count") return pp::CounterDescriptor::UNIT_COUNT;
  return pp::CounterDescriptor::UNIT_UNSPECIFIED;
}
}  // namespace

ExportCounts export_perfetto(const std::vector<const RecordingReader*>& recordings, const ExportOptions& options,
                             std::ostream& out) {
  Timeline tl = build_timeline(recordings, options);
  ExportCounts counts;
  PacketWriter writer(out);
  uint64_t next_uuid = 1;

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
    for (auto& [pid, proc] : rec.processes) {
      uint64_t u = next_uuid++;
      process_uuid[pid] = u;
      descriptor([&](pp::TrackDescriptor* d) {
        d->set_uuid(u);
        d->mutable_process()->set_pid(static_cast<int32_t>(proc.out_pid));
        d->mutable_process()->set_process_name(proc.name);
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
          d->mutable_thread()->set_thread_name("tid " + std::to_string(th.tid));
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
    uint64_t telemetry_uuid = 0;
    std::vector<uint64_t> counter_uuid(rec.series.size());
    for (size_t k = 0; k < rec.series.size(); ++k) {
      auto& s = rec.series[k];
      uint64_t parent = 0;
      if (s.out_pid) {
        for (auto& [pid, proc] : rec.processes)
          if (proc.out_pid == s.out_pid) parent = process_uuid[pid];
      }
      if (!parent) {
        if (!telemetry_uuid) {
          telemetry_uuid = next_uuid++;
          descriptor([&](pp::TrackDescriptor* d) {
            d->set_uuid(telemetry_uuid);
            d->mutable_process()->set_pid(static_cast<int32_t>(rec.telemetry_pid));
            d->mutable_process()->set_process_name("telemetry [" + rec.label + "]");
          });
        }
        parent = telemetry_uuid;
      }
      uint64_t u = next_uuid++;
      counter_uuid[k] = u;
      ++counts.counter_tracks;
      descriptor([&](pp::TrackDescriptor* d) {
        d->set_uuid(u);
        d->set_parent_uuid(parent);
        d->set_name(s.info.key() + (s.info.unit.empty() ? "" : " [" + s.info.unit + "]"));
        auto* c = d->mutable_counter();
        c->add_categories(std::string(subsystem_name(s.info.subsystem)));
        c->set_unit(counter_unit(s.info.unit));
      });
    }

    // Events of this sequence, in timestamp order; per track BEGIN/END come out properly nested because
    // each lane is walked with a stack of open slices before the stable merge by time.
    std::vector<Pending> pending;
    uint64_t order = 0;
    auto make = [&](int64_t ts, uint64_t track) -> pp::TrackEvent* {
      pending.push_back({ts, order++, {}});
      auto& p = pending.back().packet;
      p.set_timestamp(static_cast<uint64_t>(ts));
      p.set_trusted_packet_sequence_id(seq);
      auto* te = p.mutable_track_event();
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
    std::stable_sort(pending.begin(), pending.end(),
                     [](const Pending& a, const Pending& b) { return a.ts < b.ts; });
    for (auto& p : pending) writer.write(p.packet);
  }
  for (auto& [id, n] : tl.flow_counts) counts.flows += n >= 2;
  return counts;
}

}  // namespace stackscope
