// Per-worker step times from CSV: `worker,step,time` (time in any unit, consistently), or the Alibaba PAI
// mini-batch layout `,worker,gpu,time,batch_time_norm` where `time` is the step and batch_time_norm the value.
#pragma once
#include <string>

#include "model/worker_timeline.h"

namespace stackscope {

// Throws std::runtime_error naming the file, row and column of the first defect.
StepTimeTable read_step_table(const std::string& path);
// True when the file's first line looks like a step table header (so the CLI can tell inputs apart).
bool looks_like_step_table(const std::string& path);

}  // namespace stackscope
