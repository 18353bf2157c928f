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
 *   bit  34     entry only: no return probe; the record is sent at entry with no duration (asynchronous calls
 *               whose duration is only the CPU enqueue time: launches, async copies and memsets, stream waits)
 *   bit  35     steady: a blocking call (synchronisation, blocking copy, allocation) of a duty-cycled family. It
 *               stays attached and captured while the family's entry-only probes are duty-cycled: such calls are
 *               few (about one per step) and they carry the job's step cadence, which sampling would blur
 */
#define SS_COOKIE_ID(c) ((__u32)((c)&0xffff))
#define SS_COOKIE_STACK (1ULL << 16)
#define SS_COOKIE_ENTRY_DEREF(c) ((__u32)(((c) >> 20) & 0xf))
#define SS_COOKIE_RET_DEREF(c) ((__u32)(((c) >> 24) & 0xf))
#define SS_COOKIE_STR_ARG(c) ((__u32)(((c) >> 28) & 0xf))
#define SS_COOKIE_RUNTIME (1ULL << 32)
#define SS_COOKIE_DRIVER (1ULL << 33)
#define SS_COOKIE_ENTRY_ONLY (1ULL << 34)
#define SS_COOKIE_STEADY (1ULL << 35)
/* bit 36: the torch family's probe on a blocking CUDA synchronisation (steady, entry only): it delimits the job's
 * steps for the estimate of its operator calls while the operators' probes are detached (struct ss_step_window) */
#define SS_COOKIE_SYNC (1ULL << 36)

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
  SS_REC_PYSTACK = 5, /* struct ss_pystack_record */
  SS_REC_PYCODE = 6,  /* struct ss_pycode_record */
};

/* Per-CPU counter slots (map `counters` in each program). */
enum ss_counter {
  SS_CNT_RB_FULL = 0,     /* ring-buffer reservation failed: a record lost */
  SS_CNT_NESTED = 1,      /* driver call folded into the runtime call above it */
  SS_CNT_UNMATCHED = 2,   /* a return without its entry (its entry probe was attached after the call began) */
  SS_CNT_GATED = 3,       /* a call entered while capture was paused (duty-cycled probes being detached) */
  SS_CNT_PY_UNREAD = 4,   /* pystack: a traced Python thread's stack could not be read (no tstate, faulted page) */
  SS_CNT_DEEP = 5,        /* a call nested deeper than the frames kept returned: not reported */
  SS_CNT_NO_RETURN = 6,   /* a call the kernel gave no return probe (too many pending on its thread): not reported */
  SS_CNT_STALE = 7,       /* a kept call whose return never came, dropped once the thread was seen above it */
  SS_CNT_HITS = 8,        /* probe program runs (entries and returns): what the cost budget counts */
  SS_CNT_STEADY_HITS = 9, /* probe program runs of steady (never duty-cycled) probes: a fixed cost for the budget */
  SS_CNT_NUM = 10,
};

#define SS_CALL_ENTRY_ONLY 1 /* ss_call_record.flags: sent at entry, no return probe: no duration, no return value */
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

/* Where a driver call is folded without a return probe on the runtime call above it: the executable mappings of
 * the CUDA runtime and driver libraries in a process (map `fold_ranges`, key tgid). A driver call whose return
 * address lies in one of them was made by the runtime (or the driver itself) on behalf of a probed call. */
#define SS_FOLD_RANGES 8
struct ss_fold_ranges {
  __u64 lo[SS_FOLD_RANGES];
  __u64 hi[SS_FOLD_RANGES]; /* exclusive; 0: unused */
};

/* In-kernel aggregation (torch operators, --detail budgeted): per operator and CPU, calls, total time and a log2
 * histogram of durations (bucket b: [2^b, 2^(b+1)) ns; the last holds everything longer). User space reads the
 * running totals every interval and turns differences into series. */
#define SS_HIST_BUCKETS 32
struct ss_op_stats {
  __u64 count;
  __u64 total_ns;
  __u64 hist[SS_HIST_BUCKETS];
};

/* The torch family's count of a process's operator calls between its blocking CUDA synchronisations, while capture
 * is on (a counted window; user space clears it as the window opens and reads it once it closed): the calls of the
 * complete intervals between two consecutive syncs (model/sampled_count.h, estimate_from_sync_intervals). */
struct ss_step_window {
  __u64 calls;          /* operator calls counted */
  __u64 pending;        /* calls since the last sync */
  __u64 interval_calls; /* calls of complete intervals */
  __u32 intervals;      /* complete intervals */
  __u32 syncs;          /* syncs seen while capture was on */
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

/* ---- CPython stack sampling (bpf/pystack.bpf.c, --python-mode stack) ----------------------------------------
 * The interpreter's frames are read from the traced process's memory: _PyRuntime -> interpreters.head ->
 * threads.head -> next... (the PyThreadState whose native_thread_id is the thread) -> cframe -> current_frame ->
 * previous... Each frame gives its code object; a sample carries code object addresses, and the first time a
 * process's code object is seen its names travel once in an ss_pycode_record. Offsets per CPython version come
 * from user space (src/trace/python_offsets.cpp), verified by eval/tracing/python_offsets.py. */
#define SS_PYSTACK_DEPTH 32
#define SS_PYSTACK_ONCPU 1     /* a CPU-clock sample: duration_ns is the sampling period */
#define SS_PYSTACK_OFFCPU 2    /* blocked (voluntary switch-out -> switch-in): duration_ns is the blocked time */
#define SS_PYSTACK_TRUNCATED 4 /* the outermost frames are missing (deeper than kept, or the walk stopped) */
#define SS_PYCODE_NAME_LEN 64
#define SS_PYCODE_FILE_LEN 128

struct ss_py_offsets {
  __u16 runtime_interpreters_head; /* _PyRuntimeState.interpreters.head */
  __u16 interp_next;               /* PyInterpreterState.next */
  __u16 interp_threads_head;       /* PyInterpreterState.threads.head */
  __u16 tstate_next;               /* PyThreadState.next */
  __u16 tstate_native_thread_id;
  __u16 tstate_cframe;
  __u16 cframe_current_frame;
  __u16 frame_code;     /* _PyInterpreterFrame.f_code */
  __u16 frame_previous;
  __u16 frame_owner;
  __u16 code_filename;  /* PyCodeObject.co_filename; co_name and co_qualname follow it */
  __u16 code_name;
  __u16 code_qualname;
  __u16 code_firstlineno;
  __u16 unicode_state;      /* PyASCIIObject.state: compact bit 5, ascii bit 6 */
  __u16 unicode_length;     /* PyASCIIObject.length (characters) */
  __u16 unicode_ascii_data; /* sizeof(PyASCIIObject): where a compact ASCII string's characters start */
  __u8 owner_cstack;        /* frame owner of C-stack shim frames (3.12: 3); 0xff: none */
  __u8 pad[5];
};

struct ss_py_proc { /* per traced Python process (tgid) */
  __u64 runtime;     /* address of _PyRuntime in the process */
  struct ss_py_offsets off;
};

struct ss_pystack_record {
  __u32 kind; /* SS_REC_PYSTACK */
  __u32 pid;
  __u32 tid;
  __u32 flags; /* SS_PYSTACK_* */
  __u64 start_ns;
  __u64 duration_ns;
  __u32 depth; /* frames in codes[], leaf first */
  __u32 cpu;
  __u64 codes[SS_PYSTACK_DEPTH];
};

struct ss_pycode_record {
  __u32 kind; /* SS_REC_PYCODE */
  __u32 pid;
  __u64 code; /* code object address in the process */
  __s32 firstlineno;
  __u32 pad;
  char qualname[SS_PYCODE_NAME_LEN]; /* "" when not a compact ASCII string */
  char filename[SS_PYCODE_FILE_LEN];
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
