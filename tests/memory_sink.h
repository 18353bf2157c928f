// An in-memory TelemetrySink for tests: keeps every series, sample, note and drop, thread-safe like the real one.
#pragma once
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "model/sink.h"

namespace stackscope::testing {

class MemorySink : public TelemetrySink {
 public:
  struct NoteEntry {
    std::string source, text;
  };

  SeriesId add_series(const SeriesInfo& info) override {
    std::lock_guard lk(mu_);
    std::string key = info.host + "\x1f" + info.key();
    auto it = ids_.find(key);
    if (it != ids_.end()) return it->second;
    SeriesInfo s = info;
    s.id = static_cast<SeriesId>(series_.size() + 1);
    ids_.emplace(key, s.id);
    series_.push_back(s);
    return s.id;
  }
  void append_event(Event&& e) override {
    std::lock_guard lk(mu_);
    events_.push_back(std::move(e));
  }
  void append_samples(std::span<const Sample> samples) override {
    std::lock_guard lk(mu_);
    samples_.insert(samples_.end(), samples.begin(), samples.end());
    ++batches_;
  }
  void add_drops(std::string_view source, uint64_t n) override {
    std::lock_guard lk(mu_);
    drops_[std::string(source)] += n;
  }
  void add_note(std::string_view source, std::string_view text) override {
    std::lock_guard lk(mu_);
    notes_.push_back({std::string(source), std::string(text)});
  }

  std::vector<SeriesInfo> series() const {
    std::lock_guard lk(mu_);
    return series_;
  }
  std::vector<Sample> samples() const {
    std::lock_guard lk(mu_);
    return samples_;
  }
  std::vector<Event> events() const {
    std::lock_guard lk(mu_);
    return events_;
  }
  std::vector<NoteEntry> notes() const {
    std::lock_guard lk(mu_);
    return notes_;
  }
  size_t batches() const {
    std::lock_guard lk(mu_);
    return batches_;
  }
  // The series with this name (and device, when given), or nullptr.
  const SeriesInfo* find(const std::string& name, const std::string& device = "\x01") const {
    std::lock_guard lk(mu_);
    for (const SeriesInfo& s : series_)
      if (s.name == name && (device == "\x01" || s.device == device)) return &s;
    return nullptr;
  }
  // Samples of one series, in arrival order.
  std::vector<Sample> samples_of(SeriesId id) const {
    std::lock_guard lk(mu_);
    std::vector<Sample> out;
    for (const Sample& s : samples_)
      if (s.series == id) out.push_back(s);
    return out;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, SeriesId> ids_;
  std::vector<SeriesInfo> series_;  // id i at index i-1; never reallocated under a returned pointer after setup
  std::vector<Sample> samples_;
  std::vector<Event> events_;
  std::vector<NoteEntry> notes_;
  std::map<std::string, uint64_t> drops_;
  size_t batches_ = 0;
};

}  // namespace stackscope::testing
