// SPDX-License-Identifier: GPL-2.0
/* bench/uprobe_cost: the smallest programs a uprobe and a uretprobe can run, so the measured cost per call is the
 * kernel's trap and dispatch, not the program. Each adds one to a counter that user space reads to check that
 * every call was seen. Plain uapi headers (no vmlinux.h, no CO-RE): nothing here reads kernel structures. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

__u64 entry_hits = 0;
__u64 return_hits = 0;

SEC("uprobe")
int minimal_entry(void *ctx) {
  entry_hits++;
  return 0;
}

SEC("uretprobe")
int minimal_return(void *ctx) {
  return_hits++;
  return 0;
}
