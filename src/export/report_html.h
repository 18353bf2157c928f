// `stackscope report`: one self-contained HTML page (inline SVG, one small inline script that checks the page
// drew; no network) for one recording or several: the job (command, host, GPUs, span), its progress and step
// time over the run with incidents and phases shaded, one section per incident with the evidence series plotted
// around it (axes, units, legends), per-layer summaries (top kernels, operators, Python functions, NCCL; GPU
// utilisation, memory, power; host CPU) and, for several ranks, the straggler view.
// The incident engine's input and report come from the caller (the CLI builds them as `analyze` does); this file
// only reads the recording for the per-layer summaries and its metadata.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "analyze/incidents/incident_engine.h"
#include "analyze/stragglers/straggler.h"
#include "store/recording_reader.h"

namespace stackscope {

struct ReportRecording {
  const RecordingReader* reader = nullptr;
  const analyze::incidents::IncidentInput* input = nullptr;      // the engine's window tables and progress
  const analyze::incidents::IncidentReport* incidents = nullptr;  // what the engine found in them
  int64_t start_ns = 0, end_ns = 0;  // CLOCK_MONOTONIC span of the data
  int64_t realtime_offset_ns = 0;
};

struct ReportOptions {
  std::string title = "stackscope report";
  size_t top = 12;  // rows per summary table
  const analyze::StragglerReport* stragglers = nullptr;  // several ranks: KAIR's view
  std::string stragglers_note;  // why there is no straggler view (several recordings, but no analysis)
};

// Throws std::invalid_argument when a recording lacks its input or report.
std::string report_html(const std::vector<ReportRecording>& recordings, const ReportOptions& options);

}  // namespace stackscope
