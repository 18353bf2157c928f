// `stackscope analyze` (default detector "incidents"): reads each recording into the incident engine
// (store/recording_incident_input.h), prints what the engine found (export/incident_report.h) -- one line for a
// healthy run, otherwise one block per incident ranked by the job time it cost -- or the JSON object of
// docs/INCIDENTS.md, and stores the incidents back into the recording as findings (detector "incident").
#include <vector>

#include "analyze/incidents/incident_engine.h"
#include "cli/analyze.h"
#include "export/incident_report.h"
#include "store/recording_incident_input.h"
#include "store/recording_reader.h"

namespace stackscope::cli {

AnalysisOutput analyze_incidents(const AnalyzeOptions& opt) {
  AnalysisOutput out;
  out.json = {{"schema", "stackscope.incidents/1"}, {"recordings", nlohmann::json::array()}};
  for (const std::string& path : opt.recordings) {
    const RecordingReader reader(path);
    const RecordingIncidentInput input = read_incident_input(reader, opt.incident_window_s);
    analyze::incidents::IncidentOptions io;
    io.episodes.v1_thresholds = opt.episodes_v1;
    const analyze::incidents::IncidentReport report = analyze::incidents::find_incidents(input.input, io);
    if (opt.store) {
      std::vector<Finding> findings;
      for (const Incident& inc : report.incidents) findings.push_back(incident_finding(inc, input.host));
      store_findings(path, "incident", findings);
    }
    RenderedIncidentReport rendered = render_incident_report(path, input, report, opt.incident_window_s, opt.verbose);
    out.json["recordings"].push_back(std::move(rendered.json));
    out.text += rendered.text;
  }
  return out;
}

}  // namespace stackscope::cli
