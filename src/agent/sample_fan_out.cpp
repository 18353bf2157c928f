#include "agent/sample_fan_out.h"

#include <algorithm>
#include <climits>

#include "model/clock.h"

namespace stackscope::agent {

SampleFanOut::SampleFanOut(int idle_interval_ms)
    : idle_interval_ms_(std::max(idle_interval_ms, 1)),
      live_ms_(std::make_shared<std::atomic<int>>(idle_interval_ms_)),
      idle_(std::make_shared<std::atomic<bool>>(true)) {}

SampleFanOut::~SampleFanOut() = default;

SampleFanOut::Subscription::~Subscription() { fan_.unsubscribe(id_); }

std::unique_ptr<SampleFanOut::Subscription> SampleFanOut::subscribe(TelemetrySink& sink, int interval_ms,
                                                                   Consumer who) {
  std::lock_guard lk(mu_);
  const uint64_t id = next_id_++;
  Share& c = consumers_[id];
  c.sink = &sink;
  c.interval_ns = static_cast<int64_t>(std::max(interval_ms, 1)) * 1'000'000;
  c.job = who == Consumer::job;
  for (const auto& [source, text] : notes_) sink.add_note(source, text);
  // A static value (gpu.mem.total) still holds when the consumer joins: stamped then, not when the node read it,
  // or a job's segment would begin minutes before the job (its analysis then judged a grid mostly before the job
  // and found no progress signal in it: an agent segment can begin with a minute of node idle before the job).
  const int64_t joined_ns = monotonic_ns();
  for (const auto& [index, s] : static_last_) {
    const Sample out{id_in(c, index), std::max(s.t_ns, joined_ns), s.value};
    sink.append_samples({&out, 1});
    c.last_t[index] = out.t_ns;
  }
  update_live_interval();
  return std::unique_ptr<Subscription>(new Subscription(*this, id));
}

void SampleFanOut::unsubscribe(uint64_t id) {
  std::lock_guard lk(mu_);
  consumers_.erase(id);
  update_live_interval();
}

void SampleFanOut::set_feeding(bool on) {
  std::lock_guard lk(mu_);
  feeding_.store(on);
  if (on) return;
  notes_.clear();
  static_last_.clear();
}

size_t SampleFanOut::consumers() const {
  std::lock_guard lk(mu_);
  return consumers_.size();
}

void SampleFanOut::update_live_interval() {
  int64_t fastest = static_cast<int64_t>(idle_interval_ms_) * 1'000'000;
  bool idle = true;
  if (!consumers_.empty()) {
    fastest = INT64_MAX;
    for (const auto& [id, c] : consumers_) {
      fastest = std::min(fastest, c.interval_ns);
      idle = idle && !c.job;
    }
  }
  live_ms_->store(static_cast<int>(fastest / 1'000'000));
  idle_->store(idle);
}

SeriesId SampleFanOut::id_in(Share& c, size_t index) {
  if (c.ids.size() <= index) {
    c.ids.resize(series_.size());
    c.last_t.resize(series_.size(), INT64_MIN);
  }
  if (!c.ids[index]) c.ids[index] = c.sink->add_series(series_[index]);
  return *c.ids[index];
}

SeriesId SampleFanOut::add_series(const SeriesInfo& info) {
  std::lock_guard lk(mu_);
  const std::string key = info.host + "\x1f" + info.key();
  if (auto it = by_key_.find(key); it != by_key_.end()) return it->second;
  series_.push_back(info);
  const auto id = static_cast<SeriesId>(series_.size());
  series_.back().id = id;
  by_key_.emplace(key, id);
  return id;
}

void SampleFanOut::append_samples(std::span<const Sample> samples) {
  std::lock_guard lk(mu_);
  // A consumer slower than the sampler gets a series' sample once its period is within half a round of having
  // passed since the last it got (a 1000 ms consumer of 100 ms rounds: every 10th).
  const int64_t half_round = static_cast<int64_t>(live_ms_->load()) * 500'000;
  for (const Sample& s : samples)
    if (s.series >= 1 && s.series <= series_.size() &&
        series_[s.series - 1].kind == SeriesKind::static_value)
      static_last_[s.series - 1] = s;
  std::vector<Sample> out;
  for (auto& [id, c] : consumers_) {
    out.clear();
    for (const Sample& s : samples) {
      if (s.series < 1 || s.series > series_.size()) continue;
      const size_t index = s.series - 1;
      const SeriesId to = id_in(c, index);
      const bool is_static = series_[index].kind == SeriesKind::static_value;
      if (!is_static && c.last_t[index] != INT64_MIN && s.t_ns - c.last_t[index] < c.interval_ns - half_round)
        continue;
      c.last_t[index] = s.t_ns;
      out.push_back({to, s.t_ns, s.value});
    }
    if (!out.empty()) c.sink->append_samples(out);
  }
}

void SampleFanOut::append_event(Event&& e) {
  std::lock_guard lk(mu_);
  size_t left = consumers_.size();
  for (auto& [id, c] : consumers_) c.sink->append_event(--left == 0 ? std::move(e) : Event(e));
}

void SampleFanOut::add_drops(std::string_view source, uint64_t n) {
  std::lock_guard lk(mu_);
  for (auto& [id, c] : consumers_) c.sink->add_drops(source, n);
}

void SampleFanOut::add_note(std::string_view source, std::string_view text) {
  std::lock_guard lk(mu_);
  if (notes_.size() < kMaxNotes) notes_.emplace_back(source, text);
  for (auto& [id, c] : consumers_) c.sink->add_note(source, text);
}

}  // namespace stackscope::agent
