// One sampler's output shared by several consumers, each at its own period. The agent's node NVML sampler writes
// here; the node's segments (every host_interval_ms) and each traced job's segments and incident engine (every
// interval_ms) read from it, so a node runs one NVML sampler and one XID event set however many jobs it traces.
// Two samplers (the node's and a job's) cost 1.5 cores on a 4-GPU H200 host, one XID thread spinning.
// The sampler runs at the fastest period a consumer asks for (live_interval_ms()); a slower consumer gets each
// series at its own period. A consumer that joins late gets the notes said so far and the last value of every
// static series (gpu.mem.total, written once), stamped at the join. While only the node consumes (no job traced)
// the node is idle (live_idle()): the sampler then reads its slow groups on the idle schedule
// (NvmlSamplerOptions::live_idle).
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "model/sink.h"

namespace stackscope::agent {

class SampleFanOut final : public TelemetrySink {
 public:
  explicit SampleFanOut(int idle_interval_ms);
  ~SampleFanOut() override;

  // Receives what the sampler writes until destroyed; the sink is not touched after the destructor returns.
  class Subscription {
   public:
    ~Subscription();
    Subscription(const Subscription&) = delete;
    Subscription& operator=(const Subscription&) = delete;

   private:
    friend class SampleFanOut;
    Subscription(SampleFanOut& fan, uint64_t id) : fan_(fan), id_(id) {}
    SampleFanOut& fan_;
    uint64_t id_;
  };
  // Who consumes: the node's own share, or a traced job's (whose presence ends the idle schedule).
  enum class Consumer { node, job };
  std::unique_ptr<Subscription> subscribe(TelemetrySink& sink, int interval_ms, Consumer who);

  // Whether a sampler writes here now (the node's started; a job then needs no sampler of its own). Off: the notes
  // and static values kept for late consumers are dropped (the next sampler says its own).
  void set_feeding(bool on);
  bool feeding() const { return feeding_.load(); }
  // The period the sampler should run at: the fastest consumer's, or the idle period with none.
  std::shared_ptr<const std::atomic<int>> live_interval_ms() const { return live_ms_; }
  // True while no job consumes (the node alone, or nobody).
  std::shared_ptr<const std::atomic<bool>> live_idle() const { return idle_; }
  size_t consumers() const;

  SeriesId add_series(const SeriesInfo& info) override;
  void append_event(Event&& e) override;
  void append_samples(std::span<const Sample> samples) override;
  void add_drops(std::string_view source, uint64_t n) override;
  void add_note(std::string_view source, std::string_view text) override;

 private:
  struct Share {
    TelemetrySink* sink = nullptr;
    int64_t interval_ns = 0;
    bool job = false;
    std::vector<std::optional<SeriesId>> ids;  // by our series index: its id in the consumer's sink
    std::vector<int64_t> last_t;               // by our series index: the last sample forwarded
  };
  void unsubscribe(uint64_t id);
  void update_live_interval();  // under mu_
  SeriesId id_in(Share& c, size_t index);

  const int idle_interval_ms_;
  std::shared_ptr<std::atomic<int>> live_ms_;
  std::shared_ptr<std::atomic<bool>> idle_;
  std::atomic<bool> feeding_{false};
  mutable std::mutex mu_;
  std::vector<SeriesInfo> series_;           // by index (our SeriesId - 1)
  std::map<std::string, SeriesId> by_key_;   // host + key
  std::map<size_t, Sample> static_last_;     // by index: the last value of each static series
  std::vector<std::pair<std::string, std::string>> notes_;  // (source, text): the first kMaxNotes
  std::map<uint64_t, Share> consumers_;
  uint64_t next_id_ = 1;
  static constexpr size_t kMaxNotes = 64;
};

}  // namespace stackscope::agent
