// The incident report's text (export/incident_report.h): what `analyze` prints for each incident.
#include <gtest/gtest.h>

#include <string>

#include "export/incident_report.h"

using namespace stackscope;

// Each piece of evidence names its metric once, qualified by its layer: a layer's own summary column already
// starts with the layer (python.offcpu_fraction), where printing both gave "python.python.offcpu_fraction".
TEST(IncidentReportText, EvidenceNamesItsMetricQualifiedByItsLayerOnce) {
  RecordingIncidentInput in;
  in.start_ns = 0;
  in.end_ns = 60'000'000'000;
  analyze::incidents::IncidentReport rep;
  rep.windows = 60;
  rep.progress_metric = "steps";
  Incident inc;
  inc.id = 1;
  inc.start_ns = 20'000'000'000;
  inc.end_ns = 30'000'000'000;
  inc.cause.cls = CauseClass::host_stall;
  inc.cause.evidence.push_back({"python.offcpu_fraction", "threads blocked", "python", 1.0, 2.0, 5.0});
  inc.cause.evidence.push_back({"cpu.busy_fraction", "ratio", "host", 0.2, 0.9, 8.0});
  rep.incidents.push_back(inc);
  const std::string text = render_incident_report("run.sdb", in, rep, 1.0, false).text;
  EXPECT_NE(text.find("evidence: python.offcpu_fraction 1 -> 2 threads blocked"), std::string::npos) << text;
  EXPECT_NE(text.find("evidence: host.cpu.busy_fraction 0.2 -> 0.9 ratio"), std::string::npos) << text;
  EXPECT_EQ(text.find("python.python"), std::string::npos) << text;
}
