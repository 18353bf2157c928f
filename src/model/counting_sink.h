// A TelemetrySink that declares series and counts samples but keeps nothing: for measuring a collector's own
// cost or memory (benchmarks, tests) without a store's.
#pragma once
#include <cstdint>
#include <span>
#include <string_view>

#include "model/sink.h"

namespace stackscope {

class CountingSink final : public TelemetrySink {
 public:
  SeriesId add_series(const SeriesInfo&) override { return ++series; }
  void append_event(Event&&) override {}
  void append_samples(std::span<const Sample> s) override { samples += s.size(); }
  void add_drops(std::string_view, uint64_t) override {}
  void add_note(std::string_view, std::string_view) override {}
  SeriesId series = 0;
  uint64_t samples = 0;
};

}  // namespace stackscope
