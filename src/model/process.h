// Whether a process still exists, for collectors and the recorder that follow a PID; thread names.
#pragma once
#include <cstdint>
#include <string>

namespace stackscope {

// False only when the kernel says there is no such process (ESRCH): one we may not signal (EPERM) exists.
bool process_exists(uint32_t pid);

// The distributed-training identity a launcher (torchrun, mpirun, Slurm) put in the process's environment, as
// "RANK=1 LOCAL_RANK=1 WORLD_SIZE=2" (the variables present, in that order: RANK, LOCAL_RANK, WORLD_SIZE,
// GROUP_RANK, CUDA_VISIBLE_DEVICES); "" when none is set or /proc/PID/environ cannot be read. Only the
// environment the process started with: a variable its code set later is not seen.
std::string process_rank_environment(uint32_t pid);

// Names the calling thread (at most 15 characters are kept): what a crash report, top -H and gdb show.
void name_this_thread(const char* name);

}  // namespace stackscope
