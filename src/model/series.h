// A named metric over time and its samples.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace stackscope {

enum class Subsystem : uint8_t { cpu = 0, gpu, memory, network, storage, software };
// How the value behaves: a level (gauge), a monotonically increasing total (counter), or a constant.
enum class SeriesKind : uint8_t { gauge = 0, counter, static_value };
// Reveal's categories (§4.2): dynamic signals get moments and trends, error/event counters get window sums,
// static or strictly periodic series stay out of single-host detection but are kept for cross-host comparison.
enum class SeriesCategory : uint8_t { dynamic = 0, event_counter, static_value };

std::string_view subsystem_name(Subsystem s);
std::optional<Subsystem> parse_subsystem(std::string_view s);
std::string_view series_kind_name(SeriesKind k);
std::optional<SeriesKind> parse_series_kind(std::string_view s);
std::string_view series_category_name(SeriesCategory c);
std::optional<SeriesCategory> parse_series_category(std::string_view s);

using SeriesId = uint32_t;

struct SeriesInfo {
  SeriesId id = 0;        // assigned by the recording
  std::string name;       // e.g. "cpu.time.user", "net.rx.bytes", "gpu.util.sm"
  Subsystem subsystem = Subsystem::cpu;
  std::string unit;       // base units: "bytes", "seconds", "jiffies", "ratio", "celsius", "watts", "count"
  SeriesKind kind = SeriesKind::gauge;
  SeriesCategory category = SeriesCategory::dynamic;
  std::string host;
  std::string device;     // core ("cpu3"), interface ("eth0"), disk ("vda"), GPU ("gpu0"), cgroup path...
  std::string source;     // which sampler produced it: "procfs", "nvml", "perf", "derived", "import"

  // "name{device}" or "name", unique within a host.
  std::string key() const { return device.empty() ? name : name + "{" + device + "}"; }
};

struct Sample {
  SeriesId series = 0;
  int64_t t_ns = 0;  // CLOCK_MONOTONIC
  double value = 0;
};

// The fields every collector fills when it declares a series; host and the rest stay default.
inline SeriesInfo series_info(std::string name, std::string device, Subsystem subsystem, std::string unit,
                              SeriesKind kind, SeriesCategory category, std::string source = "procfs") {
  SeriesInfo s;
  s.name = std::move(name);
  s.device = std::move(device);
  s.subsystem = subsystem;
  s.unit = std::move(unit);
  s.kind = kind;
  s.category = category;
  s.source = std::move(source);
  return s;
}

}  // namespace stackscope
