// SPDX-License-Identifier: GPL-2.0
/* PyTorch operator probes on `at::_ops::<op>::call` (libtorch_cpu): entry/return matched per thread by
 * where they are in its stack (call_stack.bpf.h); the uprobe's bpf_cookie is the operator's index in the user-space list. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "call_stack.bpf.h"
#include "events.h"
#include "family_maps.bpf.h"

char LICENSE[] SEC("license") = "GPL";

#define SS_TORCH_MAX_DEPTH 32 /* power of two */

/* The thread's operators in flight, outermost first (call_stack.bpf.h); id: the operator's index. */
struct ss_torch_thread {
  __u32 depth; /* frames kept */
  __u32 pad;
  struct ss_frame_pos pos[SS_TORCH_MAX_DEPTH];
  __u64 start_ns[SS_TORCH_MAX_DEPTH];
};

struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 8192);
  __type(key, __u32);
  __type(value, struct ss_torch_thread);
} torch_threads SEC(".maps");

SEC("uprobe")
int op_entry(struct pt_regs *ctx) {
  __u32 tid = (__u32)bpf_get_current_pid_tgid();
  struct ss_torch_thread *st = bpf_map_lookup_elem(&torch_threads, &tid);
  if (!st) {
    static const struct ss_torch_thread zero;
    bpf_map_update_elem(&torch_threads, &tid, &zero, BPF_NOEXIST);
    st = bpf_map_lookup_elem(&torch_threads, &tid);
    if (!st) return 0;
  }
  int j = ss_stack_push(st->pos, &st->depth, SS_TORCH_MAX_DEPTH, PT_REGS_SP(ctx), (__u32)bpf_get_attach_cookie(ctx), 0);
  if (j < 0) return 0;
  __u32 d = (__u32)j;
  st->start_ns[d & (SS_TORCH_MAX_DEPTH - 1)] = bpf_ktime_get_ns();
  return 0;
}

SEC("uretprobe")
int op_return(struct pt_regs *ctx) {
  __u64 now = bpf_ktime_get_ns();
  __u64 id = bpf_get_current_pid_tgid();
  __u32 tid = (__u32)id;
  struct ss_torch_thread *st = bpf_map_lookup_elem(&torch_threads, &tid);
  if (!st) {
    ss_count(SS_CNT_UNMATCHED);
    return 0;
  }
  __u32 op = (__u32)bpf_get_attach_cookie(ctx);
  int j = ss_stack_pop(st->pos, &st->depth, SS_TORCH_MAX_DEPTH, ss_entry_sp_at_return(ctx), op);
  if (j < 0) return 0;
  __u32 d = (__u32)j;
  __u64 start = st->start_ns[d & (SS_TORCH_MAX_DEPTH - 1)];
  struct ss_torch_record *r = bpf_ringbuf_reserve(&events, sizeof(*r), 0);
  if (!r) {
    ss_count(SS_CNT_RB_FULL);
    return 0;
  }
  r->kind = SS_REC_TORCH;
  r->op_id = op;
  r->pid = id >> 32;
  r->tid = tid;
  r->start_ns = start;
  r->duration_ns = now - start;
  r->depth = d;
  r->pad = 0;
  bpf_ringbuf_submit(r, 0);
  return 0;
}
