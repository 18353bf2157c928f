// Reads a recording into the incident engine's input (analyze/incidents/incident_engine.h) in one streaming pass
// (store/recording_window_tables.h stream_call_records: events decoded on a second thread, then the sample
// blocks) through analyze/incidents/incident_input_builder.h, the same builder `record --detect` feeds live.
// No event is held beyond the bounded prefix the step detection keeps.
#pragma once
#include <string>

#include "analyze/incidents/incident_engine.h"
#include "store/recording_reader.h"

namespace stackscope {

struct RecordingIncidentInput {
  analyze::incidents::IncidentInput input;
  std::string host;
  int64_t start_ns = 0, end_ns = 0;  // CLOCK_MONOTONIC span of the data
  int64_t realtime_offset_ns = 0;    // add to a CLOCK_MONOTONIC time for CLOCK_REALTIME
};

// Throws std::invalid_argument for a recording with no data, RecordingError for a bad file.
RecordingIncidentInput read_incident_input(const RecordingReader& reader, double window_s = 1.0);

}  // namespace stackscope
