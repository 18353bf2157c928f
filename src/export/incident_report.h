// Incidents as the user reads them (docs/INCIDENTS.md): one recording's report as JSON (its entry of the
// stackscope.incidents/1 object) and as text (one line for a healthy run, otherwise one block per incident ranked
// by the job time it cost), one incident as JSON, and one incident as the finding stored in the recording.
// `analyze`, `record --detect` and the agent's online engine (online/online_detector.h) all print through these.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "analyze/incidents/incident_engine.h"
#include "model/finding.h"
#include "model/incident.h"
#include "store/recording_incident_input.h"

namespace stackscope {

// One incident as docs/INCIDENTS.md prints it (times relative to `t0_ns`, UTC through the realtime offset).
nlohmann::json incident_json(const Incident& incident, int64_t t0_ns, int64_t realtime_offset_ns);
// The finding stored in the recording for an incident (detector "incident").
Finding incident_finding(const Incident& incident, const std::string& host);

struct RenderedIncidentReport {
  nlohmann::json json;  // the recording's entry of "recordings"
  std::string text;     // its section of the human report
};
// What the engine found in the recording at `path`, read as `input`. `window_s`: the window length the input was
// read with; `verbose`: also the windows, the progress candidates and the phases' notes.
RenderedIncidentReport render_incident_report(const std::string& path, const RecordingIncidentInput& input,
                                              const analyze::incidents::IncidentReport& report, double window_s,
                                              bool verbose);

}  // namespace stackscope
