#include "store/recording_window_tables.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

namespace stackscope {

namespace {

const std::array<Layer, 5> kCallLayers{Layer::cuda, Layer::nccl, Layer::torch, Layer::python, Layer::kernel};

// The recording's "pid" meta, when it is a number.
std::optional<uint32_t> recorded_pid(const RecordingReader& r) {
  const std::string pid = r.meta_or("pid");
  if (pid.empty() || pid.size() > 10 || !std::all_of(pid.begin(), pid.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  const unsigned long v = std::stoul(pid);
  if (v > UINT32_MAX) return std::nullopt;
  return static_cast<uint32_t>(v);
}

// Batches of decoded events from the reading thread to the windowing one; bounded, so memory stays small.
class RecordPipeline {
 public:
  static constexpr size_t kBatch = 16'384, kMaxQueued = 4;
  struct Cancelled {};

  void push(std::vector<analyze::CallRecord>&& batch) {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return queue_.size() < kMaxQueued || cancelled_; });
    if (cancelled_) throw Cancelled{};
    queue_.push_back(std::move(batch));
    cv_.notify_all();
  }
  // false once the reader has finished and everything was taken.
  bool pop(std::vector<analyze::CallRecord>& batch) {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return !queue_.empty() || done_; });
    if (queue_.empty()) return false;
    batch = std::move(queue_.front());
    queue_.pop_front();
    cv_.notify_all();
    return true;
  }
  void finish(std::exception_ptr error) {
    std::lock_guard lk(mu_);
    done_ = true;
    error_ = error;
    cv_.notify_all();
  }
  void cancel() {
    std::lock_guard lk(mu_);
    cancelled_ = true;
    cv_.notify_all();
  }
  void rethrow() {
    if (!error_) return;
    try {
      std::rethrow_exception(error_);
    } catch (const Cancelled&) {
    }
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::vector<analyze::CallRecord>> queue_;
  bool done_ = false, cancelled_ = false;
  std::exception_ptr error_;
};

}  // namespace

void stream_call_records(const RecordingReader& r, const std::vector<Layer>& layers,
                         const std::function<void(std::span<const analyze::CallRecord>)>& on_batch) {
  if (layers.empty()) return;
  EventFilter filter;
  filter.layers = layers;
  std::array<bool, static_cast<size_t>(Layer::kCount)> wanted{};
  for (Layer l : layers) wanted[static_cast<size_t>(l)] = true;
  // Arguments are compared by string id: each key is looked up once per recording, not once per event.
  constexpr uint32_t kAbsent = UINT32_MAX;
  const uint32_t depth = r.find_string("depth").value_or(kAbsent), bytes = r.find_string("bytes").value_or(kAbsent),
                 sample = r.find_string("sample").value_or(kAbsent),
                 offcpu = r.find_string("off-cpu").value_or(kAbsent);
  auto record_of = [&](const codec::EventRef& e) {
    analyze::CallRecord c = analyze::call_record_header(e);
    c.name = r.string_view_at(e.name);
    c.name_key = e.name;
    bool have_depth = false, have_bytes = false;
    for (const codec::ArgRef& a : e.args) {  // the first argument of each key counts, as Event::arg finds it
      if (a.key == depth && !have_depth) {
        have_depth = true;
        c.depth = a.kind == codec::ArgKind::integer ? a.integer : 0;
      } else if (a.key == bytes && !have_bytes) {
        have_bytes = true;
        c.bytes = static_cast<double>(std::max<int64_t>(a.kind == codec::ArgKind::integer ? a.integer : 0, 0));
      } else if (a.key == sample && !c.sample) {
        c.sample = true;
        c.offcpu = a.kind == codec::ArgKind::string && a.text == offcpu;
      }
    }
    return c;
  };
  // Two stages on two threads: reading, decompressing and decoding blocks here, windowing in the caller's
  // thread, handing over batches of records (a few MB in flight).
  RecordPipeline pipe;
  std::thread reader([&] {
    try {
      std::vector<analyze::CallRecord> batch;
      batch.reserve(RecordPipeline::kBatch);
      r.for_each_event_ref(filter, [&](const codec::EventRef& e) {
        if (!wanted[static_cast<size_t>(e.layer)]) return;
        batch.push_back(record_of(e));
        if (batch.size() == RecordPipeline::kBatch) {
          pipe.push(std::move(batch));
          batch.clear();
          batch.reserve(RecordPipeline::kBatch);
        }
      });
      if (!batch.empty()) pipe.push(std::move(batch));
      pipe.finish(nullptr);
    } catch (...) {
      pipe.finish(std::current_exception());
    }
  });
  try {
    std::vector<analyze::CallRecord> batch;
    while (pipe.pop(batch)) on_batch(batch);
  } catch (...) {
    pipe.cancel();
    reader.join();
    throw;
  }
  reader.join();
  pipe.rethrow();
}

analyze::WindowGrid recording_window_grid(const RecordingReader& r, double window_s) {
  if (!(window_s > 0)) throw std::invalid_argument("window must be > 0 seconds");
  const auto span = r.data_span();
  if (!span) throw std::invalid_argument(r.path() + " holds no events and no samples");
  // A tiny window (or a corrupt time) must not ask for gigabytes: make_window_grid refuses more than
  // analyze::kMaxWindows windows, naming the smallest window that fits.
  if (!(window_s >= 1e-9) || !(window_s <= 1e9))
    throw std::invalid_argument(fmt::format("window {:g} s is outside the limits (1 ns to 1e9 s)", window_s));
  try {
    return analyze::make_window_grid(span->first, span->second, static_cast<int64_t>(std::llround(window_s * 1e9)));
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(r.path() + ": " + e.what());
  }
}

RecordingWindowTables read_window_tables(const RecordingReader& r, const WindowTablesOptions& o) {
  RecordingWindowTables out;
  out.grid = recording_window_grid(r, o.window_s);
  auto wanted = [&](Layer l) { return o.layers.empty() || std::find(o.layers.begin(), o.layers.end(), l) != o.layers.end(); };

  std::array<std::unique_ptr<analyze::CallWindowFeatures>, static_cast<size_t>(Layer::kCount)> calls;
  std::vector<Layer> call_layers;
  for (Layer l : kCallLayers) {
    if (!wanted(l)) continue;
    analyze::CallWindowOptions co;
    co.top_names = o.top_names;
    if (l == Layer::cuda) co.always_names = analyze::cuda_sync_and_memory_calls();
    calls[static_cast<size_t>(l)] = std::make_unique<analyze::CallWindowFeatures>(l, out.grid, std::move(co));
    call_layers.push_back(l);
  }
  if (!call_layers.empty()) {
    stream_call_records(r, call_layers, [&](std::span<const analyze::CallRecord> batch) {
      for (const analyze::CallRecord& c : batch) calls[static_cast<size_t>(c.layer)]->add(c);
    });
    for (Layer l : call_layers) {
      const auto& acc = calls[static_cast<size_t>(l)];
      const std::string name(layer_name(l));
      out.events[name] = acc->events();
      if (acc->events() > 0) out.tables[name] = acc->table();
    }
  }

  const bool nvml = wanted(Layer::nvml), host = wanted(Layer::host);
  if (nvml || host) {
    std::set<uint32_t> targets = o.target_pids;
    if (auto pid = recorded_pid(r)) targets.insert(*pid);
    analyze::SeriesWindowFeatures nvml_acc(out.grid, targets), host_acc(out.grid, targets);
    r.for_each_sample_run([&](const SeriesInfo& s, std::span<const int64_t> t, std::span<const double> v) {
      out.samples += t.size();
      if (s.source == "nvml") {
        if (nvml) nvml_acc.add(s, t, v);
      } else if (host) {
        host_acc.add(s, t, v);
      }
    });
    if (nvml)
      if (auto t = nvml_acc.table(); !t.columns.empty()) out.tables["nvml"] = std::move(t);
    if (host)
      if (auto t = host_acc.table(); !t.columns.empty()) out.tables["host"] = std::move(t);
  }
  return out;
}

}  // namespace stackscope
