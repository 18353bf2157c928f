/* Which processes a program family traces: shared by proc.bpf.c and kernel.bpf.c. Each object keeps its own copy
 * of the `traced` map; user space fills each with the PIDs it was given, fork adds children in the kernel. */
#pragma once

/* --all: every process. Otherwise only the tgids in `traced` (threads count through their tgid). */
const volatile bool all_processes = false;
const volatile bool follow_children = true;

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 16384);
  __type(key, __u32);
  __type(value, __u8);
} traced SEC(".maps");

static __always_inline int is_traced(__u32 tgid) {
  return all_processes || bpf_map_lookup_elem(&traced, &tgid) != 0;
}

/* At fork of a new process (not a thread): a traced parent's child is traced too, at once. 1: the child is traced. */
static __always_inline int inherit_traced(__u32 parent_tgid, __u32 child_tgid) {
  if (all_processes) return 1;
  if (!follow_children || !bpf_map_lookup_elem(&traced, &parent_tgid)) return 0;
  __u8 one = 1;
  bpf_map_update_elem(&traced, &child_tgid, &one, BPF_ANY);
  return 1;
}
