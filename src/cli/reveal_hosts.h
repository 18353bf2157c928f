// Reveal's host pipeline over samples that are not in recordings (the fleet store, analyze_fleet.cpp); its own
// header because the Reveal types clash with the per-layer GMM's in analyze_gmm.cpp.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "analyze/reveal/reveal_recording.h"
#include "cli/analyze.h"

namespace stackscope::cli {

// One input per host, its stream's span the windows' span; findings are not stored anywhere.
struct RevealHostInput {
  std::string label, host;  // label: where the samples came from, as the report names them
  analyze::SampleStream stream;
  int64_t realtime_offset_ns = 0;  // the stream's times + this = Unix time (0: they are Unix time)
  std::optional<int64_t> sampling_interval_ns;
};
AnalysisOutput analyze_reveal_hosts(std::vector<RevealHostInput> inputs, const AnalyzeOptions& options);

}  // namespace stackscope::cli
