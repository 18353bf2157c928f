/* Records shared by the eBPF programs (bpf/NAME.bpf.c) and their loaders (src/trace). Fixed sizes only, so a
 * ring-buffer reservation is one constant-size block and user space decodes without parsing. */
#ifndef STACKSCOPE_BPF_EVENTS_H
#define STACKSCOPE_BPF_EVENTS_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* ---- Generic call probes (cuda, nccl, python C-API) ------------------------------------------------------
 * One entry program and one return program serve every probed function; the uprobe's bpf_cookie says which
 * function it is and how to capture its arguments:
 *   bits  0-15  call id (index into the user-space catalog, src/trace/probe_catalog.cpp)
 *   bit  16     read SS_STACK_WORDS words above the return address (arguments 7+ and by-value structs)
 *   bits 20-23   1-based argument whose pointee (SS_DEREF_WORDS words) is read at ENTRY (launch configs)
 *   bits 24-27  1-based argument whose pointee is read at RETURN (out-parameters: cudaMalloc's void**)
 *   bits 28-31  1-based argument read as a C string at entry (cuModuleGetFunction's name)
 *   bit  32     runtime API: driver calls made while one is active on the thread are the same operation
 *   bit  33     driver API: dropped when nested under a runtime call (one launch, not two)
 */
#define SS_COOKIE_ID(c) ((__u32)((c)&0xffff))
#define SS_COOKIE_STACK (1ULL << 16)
#define SS_COOKIE_ENTRY_DEREF(c) ((__u32)(((c) >> 20) & 0xf))
#define SS_COOKIE_RET_DEREF(c) ((__u32)(((c) >> 24) & 0xf))
#define SS_COOKIE_STR_ARG(c) ((__u32)(((c) >> 28) & 0xf))
#define SS_COOKIE_RUNTIME (1ULL << 32)
#define SS_COOKIE_DRIVER (1ULL << 33)

#define SS_REG_ARGS 6
#define SS_STACK_WORDS 6
#define SS_DEREF_WORDS 8
#define SS_CALL_WORDS (SS_REG_ARGS + SS_STACK_WORDS + SS_DEREF_WORDS)
/* args[] layout: [0..5] rdi rsi rdx rcx r8 r9, [6..11] stack words at sp+8.., [12..19] dereferenced words */
#define SS_ARG_STACK 6
#define SS_ARG_DEREF 12
#define SS_STR_LEN 64

/* Ring-buffer record kinds; every record starts with its kind so one callback can serve several buffers. */
enum ss_record_kind {
  SS_REC_CALL = 1,   /* struct ss_call_record */
  SS_REC_TORCH = 2,  /* struct ss_torch_record */
  SS_REC_PYTHON = 3, /* struct ss_python_record */
  SS_REC_PROC = 4,   /* struct ss_proc_record */
};

/* Per-CPU counter slots (map `counters` in each program). */
enum ss_counter {
  SS_CNT_RB_FULL = 0,     /* ring-buffer reservation failed: a record lost */
  SS_CNT_NESTED = 1,      /* driver call folded into the runtime call above it */
  SS_CNT_UNMATCHED = 2,   /* a return without its entry (attached mid-call, or too deep) */
  SS_CNT_GATED = 3,       /* a call entered while capture was paused (duty-cycled probes being detached) */
  SS_CNT_NUM = 4,
};

struct ss_call_record {
  __u32 kind; /* SS_REC_CALL */
  __u32 call_id;
  __u32 pid; /* tgid */
  __u32 tid;
  __u64 start_ns; /* bpf_ktime_get_ns: CLOCK_MONOTONIC */
  __u64 duration_ns;
  __s64 ret;
  __u32 depth; /* probed calls active on the thread below this one */
  __u32 flags;
  __u64 args[SS_CALL_WORDS];
  char str[SS_STR_LEN];
};

struct ss_torch_record {
  __u32 kind; /* SS_REC_TORCH */
  __u32 op_id;
  __u32 pid;
  __u32 tid;
  __u64 start_ns;
  __u64 duration_ns;
  __u32 depth;
  __u32 pad;
};

/* CPython 3.11 fires function__entry only while sys.settrace/setprofile is active (ceval's DO_TRACING path),
 * function__return always: a return without its entry is still reported, as an instant. */
#define SS_PY_NO_ENTRY 1
#define SS_PY_FUNC_LEN 64
#define SS_PY_FILE_LEN 128
struct ss_python_record {
  __u32 kind; /* SS_REC_PYTHON */
  __u32 call_id; /* 0: USDT function__entry/return; else C-API catalog id */
  __u32 pid;
  __u32 tid;
  __u64 start_ns;
  __u64 duration_ns;
  __u32 depth;
  __s32 line;   /* first line seen at entry; the returning line when the entry was not seen */
  __u32 flags;  /* SS_PY_NO_ENTRY */
  __u32 pad;
  char func[SS_PY_FUNC_LEN];
  char file[SS_PY_FILE_LEN];
};

enum ss_proc_event {
  SS_PROC_FORK = 1, /* pid: child, ppid: parent */
  SS_PROC_EXEC = 2,
  SS_PROC_EXIT = 3,
  SS_PROC_MMAP_EXEC = 4, /* an executable mapping appeared (ld.so loading a library, dlopen) */
};

struct ss_proc_record {
  __u32 kind; /* SS_REC_PROC */
  __u32 event;
  __u32 pid;
  __u32 ppid;
  __u64 ts_ns;
};

/* ---- Kernel layer (bpf/kernel.bpf.c): counters aggregated in the kernel, read by user space every interval.
 * Per-CPU values; user space sums them. Times in ns of bpf_ktime_get_ns. */
struct ss_kproc_counters { /* per traced process (tgid), or key 0 for every task with --all */
  __u64 oncpu_ns;
  __u64 runq_ns;    /* runnable but waiting for a CPU: wakeup (or preemption) -> switch-in */
  __u64 blocked_ns; /* off-CPU and not runnable: switch-out -> wakeup */
  __u64 voluntary_switches;
  __u64 involuntary_switches; /* switched out while still runnable (preempted) */
  __u64 migrations;
};

#define SS_NR_SOFTIRQS 10 /* HI TIMER NET_TX NET_RX BLOCK IRQ_POLL TASKLET SCHED HRTIMER RCU */
struct ss_ksys_counters { /* system-wide */
  __u64 hardirq_count;
  __u64 hardirq_ns;
  __u64 softirq_count[SS_NR_SOFTIRQS];
  __u64 softirq_ns[SS_NR_SOFTIRQS];
  __u64 net_tx_packets;
  __u64 net_tx_bytes;
  __u64 net_rx_packets;
  __u64 net_rx_bytes;
  __u64 tcp_retransmits;
  __u64 block_issued;
  __u64 block_issued_bytes;
  __u64 block_completed; /* completions of requests whose issue was seen */
  __u64 block_latency_ns; /* sum of issue -> completion over block_completed */
};

struct ss_kirq_counters { /* per IRQ number (device IRQs: irqaction handlers) */
  __u64 count;
  __u64 ns;
};

#endif
