/* Generic entry/return probe pair for C functions whose arguments are captured raw (registers, stack words,
 * one dereferenced pointer) and decoded in user space. Included once by cuda.bpf.c, nccl.bpf.c and
 * python.bpf.c, so each family gets its own maps and ring buffer. The uprobe's bpf_cookie says which function
 * fired and how to capture it (see events.h). */
#ifndef STACKSCOPE_CALL_PROBE_BPF_H
#define STACKSCOPE_CALL_PROBE_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "call_stack.bpf.h"
#include "events.h"
#include "family_maps.bpf.h"

#define SS_CALL_MAX_DEPTH 4 /* power of two; runtime -> driver nesting is 2 deep */
#define SS_FRAME_RUNTIME 1 /* ss_frame_pos.flags: a runtime API call */

struct ss_call_frame {
  __u64 start_ns;
  __u32 suppressed;
  __u32 pad;
  __u64 args[SS_CALL_WORDS];
  char str[SS_STR_LEN];
};

/* The thread's calls in flight, outermost first (call_stack.bpf.h). */
struct ss_call_thread {
  __u32 depth; /* frames kept */
  __u32 pad;
  struct ss_frame_pos pos[SS_CALL_MAX_DEPTH];
  struct ss_call_frame frames[SS_CALL_MAX_DEPTH];
};

/* LRU: threads that die inside a probed call do not leak their slot. */
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 4096);
  __type(key, __u32);
  __type(value, struct ss_call_thread);
} call_threads SEC(".maps");

/* Zeroed template for a new thread's state (too large for the 512-byte BPF stack). */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct ss_call_thread);
} call_zero SEC(".maps");

/* Per process: the CUDA runtime's and driver's executable mappings (events.h, struct ss_fold_ranges). */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 16384);
  __type(key, __u32);
  __type(value, struct ss_fold_ranges);
} fold_ranges SEC(".maps");

/* Whether a driver call entering now was made by the CUDA runtime or the driver (its return address is in their
 * code): the runtime call above it, probed entry-only, is the operation. */
static __always_inline int ss_called_from_cuda_library(struct pt_regs *ctx) {
  __u32 tgid = bpf_get_current_pid_tgid() >> 32;
  struct ss_fold_ranges *fr = bpf_map_lookup_elem(&fold_ranges, &tgid);
  if (!fr) return 0;
  __u64 ra = ss_return_address(ctx);
  for (int i = 0; i < SS_FOLD_RANGES; ++i)
    if (fr->hi[i] && ra >= fr->lo[i] && ra < fr->hi[i]) return 1;
  return 0;
}

static __always_inline struct ss_call_thread *ss_call_thread_of(__u32 tid, int create) {
  struct ss_call_thread *st = bpf_map_lookup_elem(&call_threads, &tid);
  if (st || !create) return st;
  __u32 zero = 0;
  struct ss_call_thread *z = bpf_map_lookup_elem(&call_zero, &zero);
  if (!z) return 0;
  bpf_map_update_elem(&call_threads, &tid, z, BPF_NOEXIST);
  return bpf_map_lookup_elem(&call_threads, &tid);
}

/* Arguments (registers, stack words, one pointee, one string) as the cookie asks; args[SS_ARG_DEREF..] and str
 * are filled only where asked. */
static __always_inline void ss_capture_args(struct pt_regs *ctx, __u64 cookie, __u64 *args, char *str) {
  args[0] = PT_REGS_PARM1(ctx);
  args[1] = PT_REGS_PARM2(ctx);
  args[2] = PT_REGS_PARM3(ctx);
  args[3] = PT_REGS_PARM4(ctx);
  args[4] = PT_REGS_PARM5(ctx);
  args[5] = PT_REGS_PARM6(ctx);
  /* args[SS_ARG_STACK + k] is argument 7 + k on both ABIs: arm64 passes 8 in registers, x86-64 6 */
#if defined(__TARGET_ARCH_arm64)
  args[SS_ARG_STACK] = PT_REGS_PARM7(ctx);
  args[SS_ARG_STACK + 1] = PT_REGS_PARM8(ctx);
  if (cookie & SS_COOKIE_STACK)
    bpf_probe_read_user(&args[SS_ARG_STACK + 2], (SS_STACK_WORDS - 2) * 8, (void *)PT_REGS_SP(ctx));
#else
  if (cookie & SS_COOKIE_STACK)
    bpf_probe_read_user(&args[SS_ARG_STACK], SS_STACK_WORDS * 8, (void *)(PT_REGS_SP(ctx) + SS_STACK_ARGS_OFFSET));
#endif
  __u32 di = SS_COOKIE_ENTRY_DEREF(cookie);
  if (di >= 1 && di <= SS_REG_ARGS)
    bpf_probe_read_user(&args[SS_ARG_DEREF], SS_DEREF_WORDS * 8, (void *)args[di - 1]);
  __u32 si = SS_COOKIE_STR_ARG(cookie);
  str[0] = 0;
  if (si >= 1 && si <= SS_REG_ARGS) bpf_probe_read_user_str(str, SS_STR_LEN, (void *)args[si - 1]);
}

/* A call record reserved on the ring buffer with the call and thread filled in; NULL (counted) when it is full. */
static __always_inline struct ss_call_record *ss_call_record_reserve(__u64 cookie) {
  struct ss_call_record *r = bpf_ringbuf_reserve(&events, sizeof(*r), 0);
  if (!r) {
    ss_count(SS_CNT_RB_FULL);
    return NULL;
  }
  __u64 id = bpf_get_current_pid_tgid();
  r->kind = SS_REC_CALL;
  r->call_id = SS_COOKIE_ID(cookie);
  r->pid = id >> 32;
  r->tid = (__u32)id;
  return r;
}

/* An asynchronous call probed without a return probe: its record goes out now, with no duration. */
static __always_inline int ss_call_entry_only(struct pt_regs *ctx, __u64 cookie) {
  if (!capture_enabled) {
    ss_count(SS_CNT_GATED);
    return 0;
  }
  if ((cookie & SS_COOKIE_DRIVER) && ss_called_from_cuda_library(ctx)) {
    ss_count(SS_CNT_NESTED);
    return 0;
  }
  struct ss_call_record *r = ss_call_record_reserve(cookie);
  if (!r) return 0;
  r->duration_ns = 0;
  r->ret = 0;
  r->depth = 0;
  r->flags = SS_CALL_ENTRY_ONLY;
  ss_capture_args(ctx, cookie, r->args, r->str);
  r->start_ns = bpf_ktime_get_ns();
  /* The window may have closed while the arguments were read: a start after its close is outside it. */
  if (!*(volatile __u32 *)&capture_enabled) {
    bpf_ringbuf_discard(r, 0);
    ss_count(SS_CNT_GATED);
    return 0;
  }
  bpf_ringbuf_submit(r, ss_submit_flags());
  return 0;
}

static __always_inline int ss_call_entry(struct pt_regs *ctx) {
  __u64 cookie = bpf_get_attach_cookie(ctx);
  ss_count((cookie & SS_COOKIE_STEADY) ? SS_CNT_STEADY_HITS : SS_CNT_HITS);
  if (cookie & SS_COOKIE_ENTRY_ONLY) return ss_call_entry_only(ctx, cookie);
  __u32 tid = (__u32)bpf_get_current_pid_tgid();
  struct ss_call_thread *st = ss_call_thread_of(tid, 1);
  if (!st) return 0;
  int j = ss_stack_push(st->pos, &st->depth, SS_CALL_MAX_DEPTH, PT_REGS_SP(ctx), SS_COOKIE_ID(cookie),
                        (cookie & SS_COOKIE_RUNTIME) ? SS_FRAME_RUNTIME : 0);
  if (j < 0) return 0;
  __u32 d = (__u32)j;
  /* 1: folded into the runtime call above it (kept with its return probe, or entry-only and found by the return
   * address); 2: capture paused */
  int suppressed = !capture_enabled && !(cookie & SS_COOKIE_STEADY) ? 2
                   : (cookie & SS_COOKIE_DRIVER) &&
                           (ss_frames_have(st->pos, d, SS_CALL_MAX_DEPTH, SS_FRAME_RUNTIME) ||
                            ss_called_from_cuda_library(ctx))
                       ? 1
                       : 0;
  struct ss_call_frame *f = &st->frames[d & (SS_CALL_MAX_DEPTH - 1)];
  f->suppressed = suppressed;
  if (suppressed) return 0; /* nothing of it is reported: skip the captures */
  ss_capture_args(ctx, cookie, f->args, f->str);
  f->start_ns = bpf_ktime_get_ns(); /* last: capture cost is not charged to the call */
  /* The window may have closed while the arguments were read (the tracer reads the close time after clearing the
   * flag): a start after the close is outside the watched interval, so the call is dropped as gated. */
  if (!*(volatile __u32 *)&capture_enabled && !(cookie & SS_COOKIE_STEADY)) f->suppressed = 2;
  return 0;
}

static __always_inline int ss_call_return(struct pt_regs *ctx) {
  __u64 now = bpf_ktime_get_ns();
  __u64 cookie = bpf_get_attach_cookie(ctx);
  ss_count((cookie & SS_COOKIE_STEADY) ? SS_CNT_STEADY_HITS : SS_CNT_HITS);
  __u32 tid = (__u32)bpf_get_current_pid_tgid();
  struct ss_call_thread *st = ss_call_thread_of(tid, 0);
  if (!st) {
    ss_count(SS_CNT_UNMATCHED);
    return 0;
  }
  int j = ss_stack_pop(st->pos, &st->depth, SS_CALL_MAX_DEPTH, ss_entry_sp_at_return(ctx), SS_COOKIE_ID(cookie));
  if (j < 0) return 0;
  __u32 d = (__u32)j;
  struct ss_call_frame *f = &st->frames[d & (SS_CALL_MAX_DEPTH - 1)];
  if (f->suppressed) {
    ss_count(f->suppressed == 2 ? SS_CNT_GATED : SS_CNT_NESTED);
    return 0;
  }
  struct ss_call_record *r = ss_call_record_reserve(cookie);
  if (!r) return 0;
  r->start_ns = f->start_ns;
  r->duration_ns = now - f->start_ns;
  r->ret = PT_REGS_RC(ctx);
  r->depth = d;
  r->flags = 0;
  __builtin_memcpy(r->args, f->args, sizeof(r->args));
  __builtin_memcpy(r->str, f->str, sizeof(r->str));
  __u32 ri = SS_COOKIE_RET_DEREF(cookie);
  if (ri >= 1 && ri <= SS_REG_ARGS) {
    if (bpf_probe_read_user(&r->args[SS_ARG_DEREF], SS_DEREF_WORDS * 8, (void *)f->args[ri - 1]) != 0)
      __builtin_memset(&r->args[SS_ARG_DEREF], 0, SS_DEREF_WORDS * 8);
  }
  bpf_ringbuf_submit(r, ss_submit_flags());
  return 0;
}

/* Each program twice: as a single uprobe (kernels before 6.6, or where a uprobe_multi link fails) and for
 * uprobe_multi links (one link per family, library and process: attached and detached in one call). */
SEC("uprobe")
int call_entry(struct pt_regs *ctx) { return ss_call_entry(ctx); }
SEC("uretprobe")
int call_return(struct pt_regs *ctx) { return ss_call_return(ctx); }
SEC("uprobe.multi")
int call_entry_multi(struct pt_regs *ctx) { return ss_call_entry(ctx); }
SEC("uretprobe.multi")
int call_return_multi(struct pt_regs *ctx) { return ss_call_return(ctx); }

#endif
