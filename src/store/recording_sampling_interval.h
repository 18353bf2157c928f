// A recording's own sampling interval (analyze/reveal/window_sizing.h SamplingIntervalEstimator), read from the
// first samples of its series only: what `analyze --detector reveal` and `--detector series` size windows from.
#pragma once
#include <cstdint>
#include <optional>

#include "store/recording_reader.h"

namespace stackscope {

// The median sampling interval of the recording's series, read from their first samples only (the replay stops
// once every series seen has enough gaps, or after a bounded number of sample runs).
std::optional<int64_t> recording_sampling_interval(const RecordingReader& reader);

}  // namespace stackscope
