// SPDX-License-Identifier: GPL-2.0
/* CUDA runtime (libcudart) and driver (libcuda) API probes: launches, memory, copies, synchronisation.
 * A driver call made under a runtime call on the same thread is folded into it (one launch, not two). */
#include "call_probe.bpf.h"

char LICENSE[] SEC("license") = "GPL";
