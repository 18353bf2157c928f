// Whether a process still exists, for collectors and the recorder that follow a PID.
#pragma once
#include <cstdint>

namespace stackscope {

// False only when the kernel says there is no such process (ESRCH): one we may not signal (EPERM) exists.
bool process_exists(uint32_t pid);

}  // namespace stackscope
