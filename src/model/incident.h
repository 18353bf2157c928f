// The vocabulary of what an operator is told (docs/INCIDENTS.md): an incident is one episode in which the job
// made less progress than its steady pace, with its impact (job time lost) and its root cause (class, culprit,
// evidence); a phase is a normal part of a job (start-up, warm-up, periodic checkpoint, shutdown, idle, a slow
// stretch within the job's own variation that no layer explains) that is
// never reported as an incident. Pure data: the engine (src/analyze/incidents) fills it, the CLI prints it.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace stackscope {

enum class PhaseKind : uint8_t { startup = 0, warmup, periodic, shutdown, idle, variation };

inline std::string_view phase_kind_name(PhaseKind k) {
  constexpr std::string_view names[] = {"startup", "warmup", "periodic", "shutdown", "idle", "variation"};
  return names[static_cast<int>(k)];
}

struct Phase {
  PhaseKind kind = PhaseKind::startup;
  int64_t start_ns = 0, end_ns = 0;  // CLOCK_MONOTONIC of the recording
  std::string note;
};

// The root-cause classes of the contract (exact strings: cause_class_name).
enum class CauseClass : uint8_t {
  cpu_interference = 0,
  gpu_contention,
  host_stall,
  pcie_pressure,
  network,
  memory_pressure,
  storage_stall,
  gpu_throttling,
  collective_slowdown,
  unexplained,
};

inline std::string_view cause_class_name(CauseClass c) {
  constexpr std::string_view names[] = {"cpu_interference", "gpu_contention",  "host_stall",
                                        "pcie_pressure",    "network",         "memory_pressure",
                                        "storage_stall",    "gpu_throttling",  "collective_slowdown",
                                        "unexplained"};
  return names[static_cast<int>(c)];
}

// Who is behind a cause: kind is process | device | rank | function | thread | link.
struct Culprit {
  std::string kind, name;
  std::optional<int64_t> pid;
  double share = 0;  // how much of the evidence it accounts for (e.g. CPUs it used during the episode)
};

// One metric that moved: its steady value and its value during the episode.
struct IncidentEvidence {
  std::string metric, unit, layer;
  double expected = 0, observed = 0;
  double z = 0;  // robust z against the steady baseline
};

struct IncidentCause {
  CauseClass cls = CauseClass::unexplained;
  double confidence = 0;  // 0..1
  std::vector<Culprit> culprits;
  std::vector<IncidentEvidence> evidence;
};

// What the job itself saw: its progress metric (step time, or a rate) expected vs observed.
struct Symptom {
  std::string metric, unit;
  double expected = 0, observed = 0;
};

struct Incident {
  int id = 0;  // 1 = the largest impact
  int64_t start_ns = 0, end_ns = 0;
  std::optional<int64_t> detected_at_ns, cause_at_ns;  // online only
  Symptom symptom;
  double impact_s = 0;              // job time lost, <= (end - start)
  std::vector<std::string> layers;  // layers whose features moved
  IncidentCause cause;
  std::vector<CauseClass> also;     // other classes with some support
  std::string summary;
};

}  // namespace stackscope
