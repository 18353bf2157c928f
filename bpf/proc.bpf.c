// SPDX-License-Identifier: GPL-2.0
/* Process lifecycle for following traced jobs without a restart: fork (children inherit tracing), exec and
 * new executable mappings (ld.so, dlopen: user space rescans /proc/PID/maps and attaches), exit (detach). */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#define SS_RINGBUF_BYTES (256 << 10)
#include "events.h"
#include "family_maps.bpf.h"
#include "traced_processes.bpf.h"

char LICENSE[] SEC("license") = "GPL";

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 4096);
  __type(key, __u32);
  __type(value, __u8);
} mmap_pending SEC(".maps");

static __always_inline void emit(__u32 event, __u32 pid, __u32 ppid) {
  struct ss_proc_record *r = bpf_ringbuf_reserve(&events, sizeof(*r), 0);
  if (!r) {
    ss_count(SS_CNT_RB_FULL);
    return;
  }
  r->kind = SS_REC_PROC;
  r->event = event;
  r->pid = pid;
  r->ppid = ppid;
  r->ts_ns = bpf_ktime_get_ns();
  bpf_ringbuf_submit(r, 0);
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child) {
  __u32 child_pid = BPF_CORE_READ(child, pid), child_tgid = BPF_CORE_READ(child, tgid);
  if (child_pid != child_tgid) return 0; /* a new thread, not a process */
  __u32 ptgid = BPF_CORE_READ(parent, tgid);
  if (!inherit_traced(ptgid, child_tgid)) return 0;
  emit(SS_PROC_FORK, child_tgid, ptgid);
  return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct *p) {
  __u32 tgid = BPF_CORE_READ(p, tgid);
  if (is_traced(tgid)) emit(SS_PROC_EXEC, tgid, 0);
  return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct *p) {
  __u32 pid = BPF_CORE_READ(p, pid), tgid = BPF_CORE_READ(p, tgid);
  if (pid != tgid || !is_traced(tgid)) return 0;
  bpf_map_delete_elem(&traced, &tgid);
  emit(SS_PROC_EXIT, tgid, 0);
  return 0;
}

SEC("tracepoint/syscalls/sys_enter_mmap")
int on_mmap_enter(struct trace_event_raw_sys_enter *ctx) {
  __u64 id = bpf_get_current_pid_tgid();
  if (!(ctx->args[2] & 4 /* PROT_EXEC */) || !is_traced(id >> 32)) return 0;
  __u32 tid = (__u32)id;
  __u8 one = 1;
  bpf_map_update_elem(&mmap_pending, &tid, &one, BPF_ANY);
  return 0;
}

SEC("tracepoint/syscalls/sys_exit_mmap")
int on_mmap_exit(struct trace_event_raw_sys_exit *ctx) {
  __u64 id = bpf_get_current_pid_tgid();
  __u32 tid = (__u32)id;
  if (!bpf_map_lookup_elem(&mmap_pending, &tid)) return 0;
  bpf_map_delete_elem(&mmap_pending, &tid);
  if (ctx->ret < 0 && ctx->ret > -4096) return 0;
  emit(SS_PROC_MMAP_EXEC, id >> 32, 0);
  return 0;
}

/* A probe that does nothing but count: user space attaches it to a function of its own and times calls with and
 * without it, which is what one uprobe hit costs on this machine (the cost budget's price per hit). */
SEC("uprobe")
int calibrate(struct pt_regs *ctx) {
  ss_count(SS_CNT_HITS);
  return 0;
}
SEC("uprobe.multi")
int calibrate_multi(struct pt_regs *ctx) {
  ss_count(SS_CNT_HITS);
  return 0;
}
