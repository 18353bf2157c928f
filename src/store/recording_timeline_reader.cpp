#include "store/recording_timeline_reader.h"

#include <algorithm>
#include <map>
#include <stdexcept>

#include "store/recording_reader.h"

namespace stackscope {

namespace {

std::string arg_text(const Event& e, std::string_view key) {
  const ArgValue* v = e.arg(key);
  if (!v) return "";
  if (auto* s = std::get_if<std::string>(v)) return *s;
  if (auto* i = std::get_if<int64_t>(v)) return std::to_string(*i);
  return std::to_string(std::get<double>(*v));
}

bool is_sync_call(const std::string& name) { return name.find("Synchronize") != std::string::npos; }

}  // namespace

void read_recording_timelines(const std::string& path, TimelineSet& set) {
  RecordingReader reader(path);
  const int64_t shift = reader.summary().realtime_offset_ns;
  const std::string host = reader.meta_or("host", path.substr(path.find_last_of('/') + 1));
  std::map<uint32_t, WorkerTimeline> by_pid;
  std::map<uint32_t, int> rank_of;
  EventFilter filter;
  filter.layers = {Layer::nccl, Layer::torch, Layer::cuda};
  reader.for_each_event(filter, [&](const Event& e) {
    if (e.flags & kEventInstant) return;
    TimelineOp op;
    if (e.layer == Layer::nccl) {
      const std::string lname = e.name;
      op.kind = (lname.find("Send") != std::string::npos || lname.find("Recv") != std::string::npos) ? OpKind::p2p
                                                                                                     : OpKind::collective;
      const std::string comm = arg_text(e, "comm");
      op.comm = comm.empty() ? 0 : set.intern("comm:" + comm);
      op.bytes = e.arg_int("bytes", e.arg_int("count", 0));
      const int64_t rank = e.arg_int("rank", -1);
      if (rank >= 0 && !rank_of.count(e.pid)) rank_of[e.pid] = static_cast<int>(rank);
    } else if (e.layer == Layer::torch) {
      op.kind = OpKind::compute;
    } else if (e.layer == Layer::cuda && is_sync_call(e.name)) {
      op.kind = OpKind::sync;
    } else {
      return;  // kernel launches: host enqueue cost only, not the work
    }
    op.name = set.intern(e.name);
    op.start_ns = e.start_ns + shift;
    op.duration_ns = std::max<int64_t>(0, e.duration_ns);
    op.stream = static_cast<int32_t>(e.tid);
    by_pid[e.pid].ops.push_back(op);
  });
  if (by_pid.empty()) throw std::runtime_error(path + ": no nccl, torch or cuda synchronisation events to analyse");
  for (auto& [pid, w] : by_pid) {
    auto it = rank_of.find(pid);
    w.rank = it != rank_of.end() ? it->second : -1;
    w.worker = host + (w.rank >= 0 ? ":rank" + std::to_string(w.rank) : ":pid" + std::to_string(pid));
    std::stable_sort(w.ops.begin(), w.ops.end(), [](auto& a, auto& b) { return a.start_ns < b.start_ns; });
    set.workers.push_back(std::move(w));
  }
}

}  // namespace stackscope
