// Time: everything is CLOCK_MONOTONIC nanoseconds (what bpf_ktime_get_ns reports); a recording stores the
// offset to CLOCK_REALTIME taken at its start so recordings from several hosts can be aligned.
#pragma once
#include <cstdint>

namespace stackscope {

int64_t monotonic_ns();
int64_t realtime_ns();
// realtime - monotonic, measured as the midpoint of a few tight readings (smallest bracket wins).
int64_t realtime_offset_ns();

}  // namespace stackscope
