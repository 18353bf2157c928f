/* Per-thread stacks of probed calls in flight (call_probe.bpf.h, torch.bpf.c): each kept frame has the stack
 * pointer at its entry, where its return address lies, so an entry and a return are paired by where they are in
 * the thread's stack, not by counting. A call whose return never comes (the kernel gave it no return probe, a
 * longjmp skipped it, its return probe was attached after it began) is then dropped as soon as the thread is seen
 * above it, instead of shifting every later pairing. One stack per thread is assumed: probed calls made by a signal
 * handler on an alternate stack would drop the interrupted calls kept below them. */
#ifndef STACKSCOPE_CALL_STACK_BPF_H
#define STACKSCOPE_CALL_STACK_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "family_maps.bpf.h"

/* kernel/events/uprobes.c MAX_URETPROBE_DEPTH: a call entered while the thread already has this many return
 * probes pending (every tool's, every family's) gets none; the kernel only logs "omit uretprobe due to
 * nestedness limit". The python C-API probes reach it under deep Python recursion. */
#define SS_URETPROBE_MAX_DEPTH 64

/* Whether the kernel will give the call now entering its return probe: read in the entry program, which runs
 * before the kernel counts this call's return (prepare_uretprobe, after the entry handlers). */
static __always_inline int ss_return_will_fire(void) {
  struct task_struct *task = (struct task_struct *)bpf_get_current_task();
  struct uprobe_task *ut = BPF_CORE_READ(task, utask);
  if (!bpf_core_field_exists(ut->depth)) return 1; /* a kernel without the count: assume it fires */
  return BPF_CORE_READ(ut, depth) < SS_URETPROBE_MAX_DEPTH;
}

#if defined(__TARGET_ARCH_arm64)
/* arm64: the return address is in the link register and `ret` leaves sp as it was at the entry. */
static __always_inline __u64 ss_entry_sp_at_return(struct pt_regs *ctx) { return PT_REGS_SP(ctx); }
static __always_inline __u64 ss_return_address(struct pt_regs *ctx) { return PT_REGS_RET(ctx); }
#define SS_STACK_ARGS_OFFSET 0 /* AAPCS64: the 9th argument is at sp */
#else
/* The stack pointer a call had at its entry (its return address's slot), as seen by its return probe: `ret`
 * has popped that slot. */
static __always_inline __u64 ss_entry_sp_at_return(struct pt_regs *ctx) { return PT_REGS_SP(ctx) - 8; }
/* At a function's entry (before its prologue) the return address is the word at sp. */
static __always_inline __u64 ss_return_address(struct pt_regs *ctx) {
  __u64 ra = 0;
  bpf_probe_read_user(&ra, sizeof(ra), (const void *)PT_REGS_SP(ctx));
  return ra;
}
#define SS_STACK_ARGS_OFFSET 8 /* SysV x86-64: the 7th argument is just above the return address */
#endif

/* Where a kept call is: its entry stack pointer, and which probed function it is. */
struct ss_frame_pos {
  __u64 sp;
  __u32 id;
  __u32 flags;
};

/* Whether the call entering with stack pointer `sp` is a tail call of a probed call still in flight: its return
 * address is then the kernel's uretprobe trampoline (the caller's return, hijacked), and both share the slot. */
static __always_inline int ss_entry_is_tail_call(__u64 sp) {
  __u64 ret_addr = 0;
  if (bpf_probe_read_user(&ret_addr, sizeof(ret_addr), (const void *)sp)) return 0;
  struct task_struct *task = (struct task_struct *)bpf_get_current_task();
  struct xol_area *xol = BPF_CORE_READ(task, mm, uprobes_state.xol_area);
  if (!bpf_core_field_exists(xol->vaddr)) return 0; /* unknown layout: no tail calls recognised */
  __u64 trampoline = BPF_CORE_READ(xol, vaddr);
  return trampoline && ret_addr == trampoline;
}

/* How many of the `n` kept frames (outermost first, so their entry sps never increase) a thread can still be
 * inside when its stack pointer is `sp`: a frame entered below it, deeper in the stack, has returned; one
 * entered at `sp` itself has too, unless `keep_at_sp` (a return at `sp`, or a tail call). `cap`: the array's
 * length, a power of two. */
static __always_inline __u32 ss_frames_alive(const struct ss_frame_pos *pos, __u32 n, __u32 cap, __u64 sp,
                                             int keep_at_sp) {
  if (n > cap) n = cap;
  for (__u32 i = 0; i < cap; ++i) {
    if (i >= n) break;
    __u64 at = pos[i & (cap - 1)].sp;
    if (at < sp || (at == sp && !keep_at_sp)) return i;
  }
  return n;
}

/* The kept frame that a return closes, given its entry sp and function id: the innermost of the top frames
 * entered at that sp with that id (several share an sp: a tail call's caller and callee, or an earlier sibling
 * whose return was missed). -1 when the call was not kept (deeper than kept, or its entry was not seen). Frames
 * above `sp` must have been dropped first (ss_frames_alive). */
static __always_inline int ss_frame_returning(const struct ss_frame_pos *pos, __u32 n, __u32 cap, __u64 sp, __u32 id) {
  if (n > cap) n = cap;
  for (__u32 k = 0; k < cap; ++k) {
    if (k >= n) break;
    __u32 i = n - 1 - k;
    const struct ss_frame_pos *p = &pos[i & (cap - 1)];
    if (p->sp != sp) break;
    if (p->id == id) return (int)i;
  }
  return -1;
}

/* Whether any of the first `n` kept frames has `flag`. */
static __always_inline int ss_frames_have(const struct ss_frame_pos *pos, __u32 n, __u32 cap, __u32 flag) {
  for (__u32 i = 0; i < cap; ++i) {
    if (i >= n) break;
    if (pos[i & (cap - 1)].flags & flag) return 1;
  }
  return 0;
}

/* An entry: drops the kept frames the thread has left (counted stale) and keeps this call when its return will
 * fire and there is room. Returns the new frame's index, or -1 when the call is not kept (no return coming:
 * counted; deeper than kept: its return counts it). `*depth`: frames kept; `cap`: a power of two. */
static __always_inline int ss_stack_push(struct ss_frame_pos *pos, __u32 *depth, __u32 cap, __u64 sp, __u32 id,
                                         __u32 flags) {
  __u32 kept = *depth > cap ? cap : *depth;
  __u32 d = ss_frames_alive(pos, kept, cap, sp, kept && ss_entry_is_tail_call(sp));
  *depth = d;
  if (kept > d) ss_count_add(SS_CNT_STALE, kept - d);
  if (!ss_return_will_fire()) {
    ss_count(SS_CNT_NO_RETURN);
    return -1;
  }
  if (d >= cap) return -1;
  struct ss_frame_pos *p = &pos[d & (cap - 1)];
  p->sp = sp;
  p->id = id;
  p->flags = flags;
  *depth = d + 1;
  return (int)d;
}

/* A return of function `id` whose entry sp was `sp`: pops its kept frame and every frame above it (those above are
 * counted stale). Returns the frame's index, or -1 when the call was not kept (counted deep or unmatched). */
static __always_inline int ss_stack_pop(struct ss_frame_pos *pos, __u32 *depth, __u32 cap, __u64 sp, __u32 id) {
  __u32 kept = *depth > cap ? cap : *depth;
  __u32 n = ss_frames_alive(pos, kept, cap, sp, 1);
  int j = ss_frame_returning(pos, n, cap, sp, id);
  if (j < 0) { /* not kept: nested below a full stack of kept calls, or its entry was not seen */
    *depth = n;
    if (kept > n) ss_count_add(SS_CNT_STALE, kept - n);
    ss_count(n == cap ? SS_CNT_DEEP : SS_CNT_UNMATCHED);
    return -1;
  }
  *depth = (__u32)j;
  if (kept > (__u32)j + 1) ss_count_add(SS_CNT_STALE, kept - (__u32)j - 1);
  return j;
}

#endif
