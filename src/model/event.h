// One traced call or occurrence: a CUDA launch, an NCCL collective, a Torch operator, a Python call...
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "model/layer.h"

namespace stackscope {

using ArgValue = std::variant<int64_t, double, std::string>;

struct EventArg {
  std::string key;  // e.g. "bytes", "grid_x", "stream", "rank", "ret", "datatype"
  ArgValue value;
};

enum EventFlags : uint8_t {
  kEventNone = 0,
  // Only the host-side enqueue was seen (kernel launch, async copy, NCCL call): duration is the
  // enqueue cost on the CPU, never GPU execution time.
  kEventHostEnqueue = 1 << 0,
  // A point in time (duration_ns is 0 and means nothing).
  kEventInstant = 1 << 1,
  // The exit was not seen (process died, probe detached).
  kEventUnfinished = 1 << 2,
};

struct Event {
  Layer layer = Layer::host;
  uint8_t flags = kEventNone;
  uint32_t pid = 0;
  uint32_t tid = 0;
  int64_t start_ns = 0;     // CLOCK_MONOTONIC
  int64_t duration_ns = 0;  // host-observed; see kEventHostEnqueue
  std::string name;
  std::vector<EventArg> args;

  const ArgValue* arg(std::string_view key) const {
    for (auto& a : args)
      if (a.key == key) return &a.value;
    return nullptr;
  }
  // The integer argument `key`, or `fallback` when absent or not an integer.
  int64_t arg_int(std::string_view key, int64_t fallback = 0) const {
    auto* v = arg(key);
    if (v && std::holds_alternative<int64_t>(*v)) return std::get<int64_t>(*v);
    return fallback;
  }
};

}  // namespace stackscope
