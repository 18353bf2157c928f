#include "store/kineto_trace_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <map>
#include <regex>
#include <set>
#include <unordered_map>

#include "store/bounded_csv.h"
#include "store/step_table_reader.h"

namespace stackscope {

std::string read_maybe_compressed(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string data = ss.str();
  const bool gzip = data.size() >= 2 && static_cast<unsigned char>(data[0]) == 0x1f && static_cast<unsigned char>(data[1]) == 0x8b;
  const bool zlib = data.size() >= 2 && static_cast<unsigned char>(data[0]) == 0x78 &&
                    ((static_cast<unsigned char>(data[0]) << 8) | static_cast<unsigned char>(data[1])) % 31 == 0;
  if (!gzip && !zlib) return data;
  z_stream zs{};
  if (inflateInit2(&zs, 15 + 32) != Z_OK) throw std::runtime_error(path + ": zlib init failed");  // 32: auto gzip/zlib
  zs.next_in = reinterpret_cast<Bytef*>(data.data());
  zs.avail_in = static_cast<uInt>(data.size());
  // A decompression bomb (4 MB inflating to 1 GB took 2 GB) ends with an error: honest JSON compresses 5 to
  // 30 times, so anything past 64 MiB may inflate at most kMaxRatio times its compressed size.
  constexpr size_t kMaxRatio = 100, kAlwaysAllowed = size_t{64} << 20;
  const size_t max_out = std::max(kAlwaysAllowed, data.size() * kMaxRatio);
  std::string out;
  char buf[1 << 16];
  int rc;
  do {
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof buf;
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      inflateEnd(&zs);
      throw std::runtime_error(path + ": corrupt compressed data (zlib error " + std::to_string(rc) + ")");
    }
    out.append(buf, sizeof buf - zs.avail_out);
    if (out.size() > max_out) {
      inflateEnd(&zs);
      throw std::runtime_error(path + ": inflates to more than " + std::to_string(max_out >> 20) + " MiB (" +
                               std::to_string(kMaxRatio) + " times its compressed size): refusing a decompression bomb");
    }
  } while (rc != Z_STREAM_END && (zs.avail_in > 0 || zs.avail_out == 0));
  inflateEnd(&zs);
  if (rc != Z_STREAM_END) throw std::runtime_error(path + ": truncated compressed data");
  return out;
}

bool looks_like_kineto_trace(const std::string& path) {
  auto ends = [&](const char* s) {
    std::string suf(s);
    return path.size() >= suf.size() && path.compare(path.size() - suf.size(), suf.size(), suf) == 0;
  };
  return ends(".json") || ends(".json.gz") || ends(".pt.trace.json") || ends(".pt.trace.json.gz");
}

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// The collective itself ("gloo:all_reduce" runs on gloo's thread, "nccl:all_reduce" is the launch), not
// "c10d::allreduce_", which only enqueues it and ends long before the collective does.
bool is_cpu_collective(const std::string& name) {
  const auto n = lower(name);
  return n.rfind("gloo:", 0) == 0 || n.rfind("nccl:", 0) == 0;
}

OpKind kernel_kind(const std::string& name, const std::string& cat) {
  if (cat == "gpu_memcpy" || cat == "gpu_memset") return OpKind::memcpy;
  const auto n = lower(name);
  if (n.find("nccl") != std::string::npos) {
    if (n.find("sendrecv") != std::string::npos || n.find("_send") != std::string::npos ||
        n.find("_recv") != std::string::npos)
      return OpKind::p2p;
    return OpKind::collective;
  }
  return OpKind::compute;
}

int64_t to_ns(const nlohmann::json& v) { return static_cast<int64_t>(std::llround(v.get<double>() * 1000.0)); }

bool has(const std::string& n, const char* what) { return n.find(what) != std::string::npos; }

// Operation kinds from names alone (a converted or merged trace has its own categories).
OpKind kind_from_name(const std::string& name) {
  const auto n = lower(name);
  if (has(n, "sendrecv") || has(n, "send") || has(n, "recv")) return (has(n, "nccl") || has(n, "p2p")) ? OpKind::p2p : OpKind::compute;
  for (const char* c : {"allreduce", "all_reduce", "allgather", "all_gather", "reducescatter", "reduce_scatter",
                        "broadcast", "barrier", "alltoall", "all_to_all", "nccl"})
    if (has(n, c)) return OpKind::collective;
  if (has(n, "synchronize")) return OpKind::sync;
  return OpKind::compute;
}

// Visits the top-level spans of each thread: spans sorted by (tid, start), and a span that starts inside the
// previous top-level span of its thread is that span's child and skipped.
template <typename Span, typename Visit>
void for_each_top_level_span(std::vector<Span>& spans, Visit visit) {
  std::sort(spans.begin(), spans.end(), [](auto& a, auto& b) { return a.tid != b.tid ? a.tid < b.tid : a.ts < b.ts; });
  int64_t cur_tid = INT64_MIN, top_end = INT64_MIN;
  for (auto& s : spans) {
    if (s.tid != cur_tid) {
      cur_tid = s.tid;
      top_end = INT64_MIN;
    }
    if (s.ts < top_end) continue;
    top_end = s.ts + s.dur;
    visit(s);
  }
}

// A whole-job trace: one worker per pid. Events of every category count; per (pid, tid) only top-level spans
// (a span inside the previous one is its child).
void read_whole_job_trace(const std::string& path, const nlohmann::json& events, TimelineSet& set) {
  std::map<int64_t, std::string> process_name;
  struct Raw {
    std::string name;
    int64_t ts, dur, tid;
  };
  std::map<int64_t, std::vector<Raw>> by_pid;
  for (const auto& e : events) {
    if (!e.is_object() || !e.contains("pid") || !e["pid"].is_number_integer()) continue;
    const int64_t pid = e["pid"].get<int64_t>();
    const std::string ph = e.value("ph", "");
    if (ph == "M" && e.value("name", "") == "process_name" && e.contains("args") && e["args"].is_object() &&
        e["args"].contains("name") && e["args"]["name"].is_string())
      process_name[pid] = e["args"]["name"].get<std::string>();
    if (ph != "X" || !e.contains("ts") || !e["ts"].is_number() || !e.contains("dur") || !e["dur"].is_number()) continue;
    const int64_t tid = e.contains("tid") && e["tid"].is_number_integer() ? e["tid"].get<int64_t>() : 0;
    by_pid[pid].push_back({e.value("name", ""), to_ns(e["ts"]), std::max<int64_t>(0, to_ns(e["dur"])), tid});
  }
  static const std::regex rank_re(R"((?:rank|Rank|RANK)[ _:#-]*(\d+))");
  for (auto& [pid, raws] : by_pid) {
    WorkerTimeline w;
    std::smatch m;
    const std::string pname = process_name.count(pid) ? process_name[pid] : "";
    if (std::regex_search(pname, m, rank_re)) w.rank = std::stoi(m[1]);
    w.worker = w.rank >= 0 ? "rank" + std::to_string(w.rank) : (pname.empty() ? "pid" + std::to_string(pid) : pname);
    for_each_top_level_span(raws, [&](const Raw& r) {
      TimelineOp op;
      op.name = set.intern(r.name);
      op.kind = kind_from_name(r.name);
      op.start_ns = r.ts;
      op.duration_ns = r.dur;
      op.stream = static_cast<int32_t>(r.tid & 0x7fffffff);
      w.ops.push_back(op);
    });
    std::stable_sort(w.ops.begin(), w.ops.end(), [](auto& a, auto& b) { return a.start_ns < b.start_ns; });
    if (w.ops.empty()) continue;
    set.workers.push_back(std::move(w));
  }
  if (set.workers.empty()) throw std::runtime_error(path + ": no complete (ph X) events with a pid in the trace");
}

// Kineto writes these categories; a trace with none of them was merged or converted by another tool.
bool is_kineto_category(const std::string& cat) {
  return cat == "cpu_op" || cat == "kernel" || cat == "cuda_runtime" || cat == "cuda_driver" || cat == "gpu_memcpy" ||
         cat == "gpu_memset" || cat == "user_annotation" || cat == "gpu_user_annotation" || cat == "python_function";
}

}  // namespace

TraceInputFormat sniff_trace_input(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return TraceInputFormat::unknown;
  char head[16] = {};
  in.read(head, sizeof head);
  const std::string h(head, static_cast<size_t>(in.gcount()));
  if (h.rfind("SQLite format 3", 0) == 0) return TraceInputFormat::recording;
  if (h.rfind("PAR1", 0) == 0) return TraceInputFormat::parquet;
  if (h.size() >= 2 && static_cast<unsigned char>(h[0]) == 0x1f && static_cast<unsigned char>(h[1]) == 0x8b)
    return TraceInputFormat::chrome_json;
  const size_t first = h.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && (h[first] == '{' || h[first] == '[')) return TraceInputFormat::chrome_json;
  if (looks_like_step_table(path)) return TraceInputFormat::step_table;
  return TraceInputFormat::unknown;
}

void read_kineto_trace(const std::string& path, TimelineSet& set) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(read_maybe_compressed(path));
  } catch (const nlohmann::json::exception& e) {
    // A parse error ends with the token last read, which may be the whole of a huge string: an excerpt of it.
    const std::string_view what = e.what();
    const size_t last = what.find("last read: '");
    const std::string shown = last == std::string_view::npos
                                  ? std::string(what.substr(0, 400))
                                  : std::string(what.substr(0, last + 11)) +
                                        quote_excerpt(what.substr(last + 12, what.size() - last - 13));
    throw std::runtime_error(path + ": not valid JSON: " + shown);
  }
  // The legacy autograd profiler (PyTorch builds without Kineto, e.g. Debian's) writes a bare array of
  // events without categories, timestamps relative to its own start: clock offsets are estimated later.
  if (doc.is_array()) doc = nlohmann::json{{"traceEvents", std::move(doc)}};
  if (!doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array())
    throw std::runtime_error(path + ": not a Kineto trace (no traceEvents array)");
  {
    std::set<int64_t> pids;
    bool kineto = doc.contains("distributedInfo") || doc.contains("deviceProperties") || doc.contains("schemaVersion");
    for (const auto& e : doc["traceEvents"]) {
      if (!e.is_object() || e.value("ph", "") != "X") continue;
      kineto |= is_kineto_category(e.value("cat", ""));
      if (e.contains("pid") && e["pid"].is_number_integer()) pids.insert(e["pid"].get<int64_t>());
    }
    if (!kineto && pids.size() >= 2) return read_whole_job_trace(path, doc["traceEvents"], set);
  }
  WorkerTimeline w;
  if (doc.contains("distributedInfo") && doc["distributedInfo"].is_object() &&
      doc["distributedInfo"].value("rank", -1) >= 0)
    w.rank = doc["distributedInfo"]["rank"].get<int>();
  {
    std::string stem = path.substr(path.find_last_of('/') + 1);
    for (const char* ext : {".gz", ".json", ".pt.trace"})
      if (stem.size() > std::strlen(ext) && stem.compare(stem.size() - std::strlen(ext), std::strlen(ext), ext) == 0)
        stem.resize(stem.size() - std::strlen(ext));
    w.worker = w.rank >= 0 ? "rank" + std::to_string(w.rank) : stem;
  }
  struct Raw {
    std::string name, cat;
    int64_t ts, dur;
    int64_t tid;
    const nlohmann::json* args;
  };
  std::vector<Raw> cpu, gpu;
  std::unordered_map<int64_t, int64_t> launch_ts;  // correlation -> runtime launch time
  size_t index = 0;
  for (const auto& e : doc["traceEvents"]) {
    ++index;
    if (!e.is_object() || e.value("ph", "") != "X") continue;
    if (!e.contains("ts") || !e["ts"].is_number() || !e.contains("dur") || !e["dur"].is_number())
      throw std::runtime_error(path + ": traceEvents[" + std::to_string(index - 1) + "]: complete event without numeric ts/dur");
    const std::string cat = e.value("cat", "");
    const std::string name = e.value("name", "");
    const int64_t tid = e.contains("tid") && e["tid"].is_number_integer() ? e["tid"].get<int64_t>() : 0;
    if (cat == "python_function") continue;
    const nlohmann::json* args = e.contains("args") && e["args"].is_object() ? &e["args"] : nullptr;
    Raw r{name, cat, to_ns(e["ts"]), std::max<int64_t>(0, to_ns(e["dur"])), tid, args};
    if (name.rfind("ProfilerStep#", 0) == 0 && (cat.empty() || cat == "user_annotation" || cat == "cpu_op")) {
      try {
        w.markers.push_back({std::stoi(name.substr(13)), r.ts, r.ts + r.dur});
      } catch (const std::exception&) {
      }
    } else if (cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset") {
      gpu.push_back(r);
    } else if (cat == "cpu_op" || cat == "user_annotation" || cat.empty()) {
      cpu.push_back(r);
    } else if (cat == "cuda_runtime" && args && args->contains("correlation")) {
      launch_ts[(*args)["correlation"].get<int64_t>()] = r.ts;
    }
  }
  auto comm_of = [&](const nlohmann::json* args) -> uint32_t {
    if (args && args->contains("Process Group Name") && (*args)["Process Group Name"].is_string())
      return set.intern("pg:" + (*args)["Process Group Name"].get<std::string>());
    return 0;
  };
  auto bytes_of = [](const nlohmann::json* args) -> int64_t {
    if (args && args->contains("In msg nelems") && (*args)["In msg nelems"].is_number())
      return (*args)["In msg nelems"].get<int64_t>();
    return 0;
  };
  std::sort(w.markers.begin(), w.markers.end(), [](auto& a, auto& b) { return a.start_ns < b.start_ns; });
  auto step_at = [&](int64_t t) -> int32_t {
    for (auto& m : w.markers)
      if (t >= m.start_ns && t < m.end_ns) return m.step;
    return -1;
  };
  if (!gpu.empty()) {
    for (auto& r : gpu) {
      TimelineOp op;
      op.name = set.intern(r.name);
      op.kind = kernel_kind(r.name, r.cat);
      op.start_ns = r.ts;
      op.duration_ns = r.dur;
      op.stream = static_cast<int32_t>(r.tid);
      if (is_communication(op.kind)) {
        op.comm = comm_of(r.args);
        op.bytes = bytes_of(r.args);
      }
      // The step is the ProfilerStep that launched the kernel (the GPU runs behind the CPU).
      if (!w.markers.empty() && r.args && r.args->contains("correlation")) {
        auto it = launch_ts.find((*r.args)["correlation"].get<int64_t>());
        op.step = step_at(it != launch_ts.end() ? it->second : r.ts);
      }
      w.ops.push_back(op);
    }
  } else {
    // Top-level CPU operators per thread: an operator inside the previous top-level one is its child.
    for_each_top_level_span(cpu, [&](const Raw& r) {
      TimelineOp op;
      op.name = set.intern(r.name);
      op.kind = is_cpu_collective(r.name) ? OpKind::collective : OpKind::compute;
      op.start_ns = r.ts;
      op.duration_ns = r.dur;
      op.stream = static_cast<int32_t>(r.tid & 0x7fffffff);
      if (op.kind == OpKind::collective) op.comm = comm_of(r.args);
      w.ops.push_back(op);
    });
  }
  std::stable_sort(w.ops.begin(), w.ops.end(), [](auto& a, auto& b) { return a.start_ns < b.start_ns; });
  if (w.ops.empty())
    throw std::runtime_error(path + ": no operators or kernels in the trace (read as one rank's profiler trace: events "
                             "of categories cpu_op, user_annotation or kernel; a whole-job trace needs one pid per rank)");
  set.workers.push_back(std::move(w));
}

}  // namespace stackscope
