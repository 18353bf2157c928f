// Where collectors put what they observe. Collectors see only this interface, never the store, so the same
// sampler or tracer feeds a recording file today and a ClickHouse or Prometheus sink later.
#pragma once
#include <cstdint>
#include <span>
#include <string_view>

#include "model/event.h"
#include "model/series.h"

namespace stackscope {

class TelemetrySink {
 public:
  virtual ~TelemetrySink() = default;
  // Declares a series and returns its id; the same (host, name, device) returns the same id. Thread-safe.
  virtual SeriesId add_series(const SeriesInfo& info) = 0;
  // Never blocks on disk or network. Thread-safe.
  virtual void append_event(Event&& e) = 0;
  virtual void append_samples(std::span<const Sample> samples) = 0;
  // Events lost before they reached the sink (a full BPF ring buffer, say), by source.
  virtual void add_drops(std::string_view source, uint64_t n) = 0;
  // A one-line note for the recording's log ("perf: no PMU, hardware counters unavailable").
  virtual void add_note(std::string_view source, std::string_view text) = 0;
};

}  // namespace stackscope
