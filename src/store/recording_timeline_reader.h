// Worker timelines from stackscope recordings: NCCL events (layer nccl, args rank/nranks/comm/count/bytes)
// are the collectives, Torch operators (layer torch) the compute, CUDA synchronisation calls (layer cuda) the
// synchronisations. A recording holds one host; each process that reports an NCCL rank is one worker (a
// process without one is a worker named after its pid). Times are shifted to wall-clock time by the
// recording's realtime offset, so recordings of several hosts line up.
#pragma once
#include <string>

#include "model/worker_timeline.h"

namespace stackscope {

// Appends the recording's workers to `set`. Throws RecordingError (bad file) or std::runtime_error (no
// usable events), naming the file.
void read_recording_timelines(const std::string& path, TimelineSet& set);

}  // namespace stackscope
