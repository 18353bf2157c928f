// SPDX-License-Identifier: GPL-2.0
/* NCCL API probes: communicator init (comm -> rank), collectives, p2p and group calls. Arguments are decoded
 * in user space (datatype sizes, reduction ops). */
#include "call_probe.bpf.h"

char LICENSE[] SEC("license") = "GPL";
