#include "model/process.h"

#include <signal.h>

#include <cerrno>

namespace stackscope {

bool process_exists(uint32_t pid) { return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH; }

}  // namespace stackscope
