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

/* --detail budgeted: operators are counted in op_stats (events.h, struct ss_op_stats), not sent one by one. */
const volatile bool aggregate = false;

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_HASH);
  __uint(max_entries, 8192);
  __uint(map_flags, BPF_F_NO_PREALLOC); /* per-CPU values: allocate only the operators that run */
  __type(key, __u32);
  __type(value, struct ss_op_stats);
} op_stats SEC(".maps");

/* floor(log2(v)) for v > 0, without loops (libbpf-tools' bits.bpf.h). */
static __always_inline __u32 ss_log2(__u64 v) {
  __u32 r, shift;
  r = (v > 0xFFFFFFFFULL) << 5;
  v >>= r;
  shift = (v > 0xFFFF) << 4;
  v >>= shift;
  r |= shift;
  shift = (v > 0xFF) << 3;
  v >>= shift;
  r |= shift;
  shift = (v > 0xF) << 2;
  v >>= shift;
  r |= shift;
  shift = (v > 0x3) << 1;
  v >>= shift;
  r |= shift;
  r |= (v >> 1);
  return r;
}

static __always_inline void ss_op_count(__u32 op, __u64 duration_ns) {
  struct ss_op_stats *s = bpf_map_lookup_elem(&op_stats, &op);
  if (!s) {
    static const struct ss_op_stats zero;
    bpf_map_update_elem(&op_stats, &op, &zero, BPF_NOEXIST);
    s = bpf_map_lookup_elem(&op_stats, &op);
    if (!s) return;
  }
  __u32 b = duration_ns ? ss_log2(duration_ns) : 0;
  if (b >= SS_HIST_BUCKETS) b = SS_HIST_BUCKETS - 1;
  s->count += 1;
  s->total_ns += duration_ns;
  s->hist[b & (SS_HIST_BUCKETS - 1)] += 1;
}

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

/* Per process: blocking CUDA synchronisations made (never duty-cycled), and the step window (events.h). */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 16384);
  __type(key, __u32);
  __type(value, __u64);
} sync_totals SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 16384);
  __type(key, __u32);
  __type(value, struct ss_step_window);
} step_windows SEC(".maps");

static __always_inline struct ss_step_window *ss_step_window_of(__u32 tgid) {
  struct ss_step_window *w = bpf_map_lookup_elem(&step_windows, &tgid);
  if (w) return w;
  static const struct ss_step_window zero;
  bpf_map_update_elem(&step_windows, &tgid, &zero, BPF_NOEXIST);
  return bpf_map_lookup_elem(&step_windows, &tgid);
}

/* A blocking synchronisation (SS_COOKIE_SYNC): one more for the process; in a counted window it closes the interval
 * that its previous sync there opened. */
static __always_inline int ss_sync_entry(void) {
  ss_count(SS_CNT_STEADY_HITS);
  __u32 tgid = bpf_get_current_pid_tgid() >> 32;
  __u64 *n = bpf_map_lookup_elem(&sync_totals, &tgid);
  if (!n) {
    __u64 one = 1;
    bpf_map_update_elem(&sync_totals, &tgid, &one, BPF_NOEXIST);
  } else {
    __sync_fetch_and_add(n, 1);
  }
  if (!capture_enabled) return 0;
  struct ss_step_window *w = ss_step_window_of(tgid);
  if (!w) return 0;
  if (w->syncs) {
    __u64 calls = w->pending;
    w->interval_calls += calls;
    w->intervals += 1;
  }
  w->pending = 0;
  w->syncs += 1;
  return 0;
}

static __always_inline int ss_op_entry(struct pt_regs *ctx) {
  if (bpf_get_attach_cookie(ctx) & SS_COOKIE_SYNC) return ss_sync_entry();
  ss_count(SS_CNT_HITS);
  if (aggregate && capture_enabled) {
    struct ss_step_window *w = ss_step_window_of(bpf_get_current_pid_tgid() >> 32);
    if (w) {
      __sync_fetch_and_add(&w->calls, 1);
      __sync_fetch_and_add(&w->pending, 1);
    }
  }
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
  /* 0: capture paused (the budget is about to detach the probes): the return reports nothing. The flag is read
   * before and after the time, so a reported start lies inside the watched window at both of its ends. */
  __u64 start = capture_enabled ? bpf_ktime_get_ns() : 0;
  if (start && !*(volatile __u32 *)&capture_enabled) start = 0;
  st->start_ns[d & (SS_TORCH_MAX_DEPTH - 1)] = start;
  return 0;
}

static __always_inline int ss_op_return(struct pt_regs *ctx) {
  __u64 now = bpf_ktime_get_ns();
  ss_count(SS_CNT_HITS);
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
  if (!start) {
    ss_count(SS_CNT_GATED);
    return 0;
  }
  if (aggregate) {
    ss_op_count(op, now - start);
    return 0;
  }
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
  bpf_ringbuf_submit(r, ss_submit_flags());
  return 0;
}

/* Single uprobes (old kernels, fallback) and uprobe_multi links, as in call_probe.bpf.h. */
SEC("uprobe")
int op_entry(struct pt_regs *ctx) { return ss_op_entry(ctx); }
SEC("uretprobe")
int op_return(struct pt_regs *ctx) { return ss_op_return(ctx); }
SEC("uprobe.multi")
int op_entry_multi(struct pt_regs *ctx) { return ss_op_entry(ctx); }
SEC("uretprobe.multi")
int op_return_multi(struct pt_regs *ctx) { return ss_op_return(ctx); }
