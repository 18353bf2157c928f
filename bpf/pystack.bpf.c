// SPDX-License-Identifier: GPL-2.0
/* CPython stacks sampled from the kernel (--python-mode stack), for interpreters whose function USDT is unusable
 * (3.11 fires function__entry only under settrace) or absent (3.12 builds without dtrace), and where timing C-API
 * entry points sees almost nothing (3.12 runs Python-to-Python calls inside one eval loop).
 *   on_cpu_sample: a CPU-clock perf event on every CPU; when it interrupts a thread of a registered Python
 *     process, the thread's Python stack is one on-CPU sample (duration: the sampling period).
 *   on_switch: sched_switch. When a registered Python thread blocks (voluntary switch-out; `current` is still
 *     that thread, so its memory is readable) its stack is kept in task storage; when it runs again a record
 *     carries that stack and the blocked time, if at least offcpu_min_ns.
 * The walk reads the interpreter's own structures with offsets user space chose for the process's CPython
 * version (struct ss_py_offsets). A sample holds code object addresses; a process's code object is named once,
 * in an ss_pycode_record emitted the first time it is seen (so names survive the process's exit). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "events.h"
#include "family_maps.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* Blocked periods shorter than this are not reported (a Python thread blocks very often, briefly). */
const volatile __u64 offcpu_min_ns = 200000;

#define SS_PY_WALK_THREADS 128  /* thread states examined to find the current thread's (all interpreters) */
#define SS_PY_WALK_FRAMES 48    /* frames examined per stack, C-stack shims included */
#define SS_PY_FRAME_BYTES 80    /* every frame field used lies in a frame's first 80 bytes (3.11, 3.12) */
#define SS_PY_RETRY_NS 200000000ULL /* a thread without a thread state is looked up again after this */

/* Registered by user space once it has found _PyRuntime in the process (and copied here at fork). */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 16384);
  __type(key, __u32);
  __type(value, struct ss_py_proc);
} py_procs SEC(".maps");

struct ss_py_tstate_cache {
  __u64 tstate; /* 0: the thread had none when looked up */
  __u64 checked_ns;
};
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 65536);
  __type(key, __u32);
  __type(value, struct ss_py_tstate_cache);
} py_tstates SEC(".maps");

struct ss_py_code_key {
  __u32 pid;
  __u32 pad;
  __u64 code;
};
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 65536);
  __type(key, struct ss_py_code_key);
  __type(value, __u8);
} py_codes SEC(".maps");

struct ss_py_stack {
  __u64 off_ns; /* switched out at (task storage); 0: not blocked */
  __u32 depth;
  __u32 flags;
  __u64 codes[SS_PYSTACK_DEPTH];
  __u8 frame[SS_PY_FRAME_BYTES]; /* scratch: the frame being read */
};
struct {
  __uint(type, BPF_MAP_TYPE_TASK_STORAGE);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, int);
  __type(value, struct ss_py_stack);
} py_blocked SEC(".maps");
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct ss_py_stack);
} py_scratch SEC(".maps");

static __always_inline int read_word(__u64 *out, __u64 addr) {
  *out = 0;
  return bpf_probe_read_user(out, sizeof(*out), (const void *)addr);
}

/* Loops run through bpf_loop: the verifier checks a callback once instead of every unrolled path. */
struct ss_thread_walk {
  __u64 interp, ts, found;
  __u32 tid;
  __u16 threads_head, interp_next, native_id, next;
};

static long thread_step(__u32 i, struct ss_thread_walk *w) {
  __u64 v = 0;
  if (!w->ts) { /* next interpreter's threads */
    if (!w->interp || read_word(&w->ts, w->interp + w->threads_head) || read_word(&w->interp, w->interp + w->interp_next))
      return 1;
    return 0;
  }
  if (read_word(&v, w->ts + w->native_id)) return 1;
  if (v == w->tid) {
    w->found = w->ts;
    return 1;
  }
  return read_word(&w->ts, w->ts + w->next) ? 1 : 0;
}

/* The PyThreadState of thread `tid`: cached, re-validated through its native_thread_id, else found by walking
 * every interpreter's thread list. */
static __always_inline __u64 thread_state(const struct ss_py_proc *p, __u32 tid, __u64 now) {
  struct ss_py_tstate_cache *c = bpf_map_lookup_elem(&py_tstates, &tid);
  __u64 v = 0;
  if (c) {
    if (c->tstate) {
      if (read_word(&v, c->tstate + p->off.tstate_native_thread_id) == 0 && v == tid) return c->tstate;
    } else if (now - c->checked_ns < SS_PY_RETRY_NS) {
      return 0;
    }
  }
  struct ss_thread_walk w = {.tid = tid,
                             .threads_head = p->off.interp_threads_head,
                             .interp_next = p->off.interp_next,
                             .native_id = p->off.tstate_native_thread_id,
                             .next = p->off.tstate_next};
  read_word(&w.interp, p->runtime + p->off.runtime_interpreters_head);
  bpf_loop(SS_PY_WALK_THREADS, thread_step, &w, 0);
  struct ss_py_tstate_cache nc = {w.found, now};
  bpf_map_update_elem(&py_tstates, &tid, &nc, BPF_ANY);
  return w.found;
}

struct ss_frame_walk {
  struct ss_py_stack *s;
  __u64 frame;
  __u32 n, failed;
  __u32 code_off, prev_off, owner_off, owner_cstack;
};

static long frame_step(__u32 i, struct ss_frame_walk *w) {
  struct ss_py_stack *s = w->s;
  if (!w->frame || !s) return 1;
  if (bpf_probe_read_user(s->frame, SS_PY_FRAME_BYTES, (const void *)w->frame)) {
    w->failed = 1;
    return 1;
  }
  __u32 co = w->code_off, po = w->prev_off, oo = w->owner_off;
  if (co > SS_PY_FRAME_BYTES - 8 || po > SS_PY_FRAME_BYTES - 8 || oo > SS_PY_FRAME_BYTES - 1) {
    w->failed = 1;
    return 1;
  }
  __u64 code = *(__u64 *)(s->frame + co);
  w->frame = *(__u64 *)(s->frame + po);
  if (s->frame[oo] == w->owner_cstack || !code) return 0; /* 3.12's shim under a C-called eval loop */
  __u32 n = w->n;
  if (n >= SS_PYSTACK_DEPTH) {
    s->flags |= SS_PYSTACK_TRUNCATED;
    return 1;
  }
  asm volatile("" : "+r"(n));
  s->codes[n & (SS_PYSTACK_DEPTH - 1)] = code;
  w->n = n + 1;
  return 0;
}

/* The thread's Python frames, leaf first, into s->codes. 0 on success (depth may be 0: no Python frame). */
static __always_inline int walk_stack(const struct ss_py_proc *p, __u64 tstate, struct ss_py_stack *s) {
  __u64 cframe = 0;
  s->depth = 0;
  s->flags = 0;
  if (read_word(&cframe, tstate + p->off.tstate_cframe) || !cframe) return -1;
  struct ss_frame_walk w = {.s = s,
                            .code_off = p->off.frame_code,
                            .prev_off = p->off.frame_previous,
                            .owner_off = p->off.frame_owner,
                            .owner_cstack = p->off.owner_cstack};
  if (read_word(&w.frame, cframe + p->off.cframe_current_frame)) return -1;
  bpf_loop(SS_PY_WALK_FRAMES, frame_step, &w, 0);
  s->depth = w.n;
  /* A frame still to read: the walk stopped at SS_PY_WALK_FRAMES (C-stack shims count) or at an unreadable
   * frame, so the outermost frames are missing as when the stack is deeper than kept. */
  if (w.frame) s->flags |= SS_PYSTACK_TRUNCATED;
  return w.failed && !w.n ? -1 : 0;
}

/* A compact ASCII str's characters; `tail`: its last cap-1 when longer (a path's file name). Empty otherwise. */
static __always_inline void read_ascii(char *dst, __u32 cap, const struct ss_py_proc *p, __u64 str, int tail) {
  __u32 state = 0;
  __s64 len = 0;
  dst[0] = 0;
  if (!str || bpf_probe_read_user(&state, sizeof(state), (const void *)(str + p->off.unicode_state))) return;
  if (!((state >> 5) & 1) || !((state >> 6) & 1)) return; /* not compact ASCII */
  if (bpf_probe_read_user(&len, sizeof(len), (const void *)(str + p->off.unicode_length))) return;
  __u64 skip = tail && len > (__s64)cap - 1 ? (__u64)len - (cap - 1) : 0;
  bpf_probe_read_user_str(dst, cap, (const void *)(str + p->off.unicode_ascii_data + skip));
}

static __always_inline void name_code(__u32 pid, __u64 code, const struct ss_py_proc *p) {
  struct ss_py_code_key k = {pid, 0, code};
  if (bpf_map_lookup_elem(&py_codes, &k)) return;
  struct ss_pycode_record *r = bpf_ringbuf_reserve(&events, sizeof(*r), 0);
  if (!r) {
    ss_count(SS_CNT_RB_FULL);
    return; /* not marked seen: named at its next sighting */
  }
  r->kind = SS_REC_PYCODE;
  r->pid = pid;
  r->code = code;
  r->pad = 0;
  if (bpf_probe_read_user(&r->firstlineno, sizeof(r->firstlineno), (const void *)(code + p->off.code_firstlineno)))
    r->firstlineno = 0;
  __u64 str = 0;
  read_word(&str, code + p->off.code_qualname);
  read_ascii(r->qualname, sizeof(r->qualname), p, str, 0);
  if (!r->qualname[0]) {
    read_word(&str, code + p->off.code_name);
    read_ascii(r->qualname, sizeof(r->qualname), p, str, 0);
  }
  read_word(&str, code + p->off.code_filename);
  read_ascii(r->filename, sizeof(r->filename), p, str, 1);
  bpf_ringbuf_submit(r, BPF_RB_NO_WAKEUP);
  __u8 one = 1;
  bpf_map_update_elem(&py_codes, &k, &one, BPF_ANY);
}

struct ss_name_walk {
  const struct ss_py_stack *s;
  const struct ss_py_proc *p;
  __u32 pid;
};

static long name_step(__u32 i, struct ss_name_walk *w) {
  if (i >= w->s->depth) return 1;
  asm volatile("" : "+r"(i)); /* keep the mask below: the verifier needs it on the register used */
  name_code(w->pid, w->s->codes[i & (SS_PYSTACK_DEPTH - 1)], w->p);
  return 0;
}

static __always_inline void name_codes(__u32 pid, const struct ss_py_stack *s, const struct ss_py_proc *p) {
  struct ss_name_walk w = {s, p, pid};
  bpf_loop(SS_PYSTACK_DEPTH, name_step, &w, 0);
}

static __always_inline void emit(__u32 pid, __u32 tid, const struct ss_py_stack *s, __u32 flags, __u64 start,
                                 __u64 duration) {
  struct ss_pystack_record *r = bpf_ringbuf_reserve(&events, sizeof(*r), 0);
  if (!r) {
    ss_count(SS_CNT_RB_FULL);
    return;
  }
  r->kind = SS_REC_PYSTACK;
  r->pid = pid;
  r->tid = tid;
  r->flags = flags | s->flags;
  r->start_ns = start;
  r->duration_ns = duration;
  r->depth = s->depth;
  r->cpu = bpf_get_smp_processor_id();
  __builtin_memcpy(r->codes, s->codes, sizeof(r->codes));
  /* No wakeup: in a VM waking the reader is an inter-processor interrupt, most of a sample's cost; the reader
   * drains this ring on its own every poll (at most 100 ms). */
  bpf_ringbuf_submit(r, BPF_RB_NO_WAKEUP);
}

/* The stack of the current thread into `s`; 0 when it has Python frames. */
static __always_inline int current_stack(const struct ss_py_proc *p, __u32 tid, __u64 now, struct ss_py_stack *s) {
  __u64 ts = thread_state(p, tid, now);
  if (!ts) return -1; /* not a Python thread (yet) */
  if (walk_stack(p, ts, s)) {
    ss_count(SS_CNT_PY_UNREAD);
    return -1;
  }
  return s->depth ? 0 : -1;
}

SEC("perf_event")
int on_cpu_sample(struct bpf_perf_event_data *ctx) {
  __u64 id = bpf_get_current_pid_tgid();
  __u32 pid = id >> 32, tid = (__u32)id;
  if (!pid) return 0;
  struct ss_py_proc *p = bpf_map_lookup_elem(&py_procs, &pid);
  if (!p) return 0;
  __u32 zero = 0;
  struct ss_py_stack *s = bpf_map_lookup_elem(&py_scratch, &zero);
  if (!s) return 0;
  __u64 now = bpf_ktime_get_ns();
  if (current_stack(p, tid, now, s)) return 0;
  name_codes(pid, s, p);
  __u64 period = ctx->sample_period;
  emit(pid, tid, s, SS_PYSTACK_ONCPU, now - period, period);
  return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(on_switch, bool preempt, struct task_struct *prev, struct task_struct *next, unsigned int prev_state) {
  __u64 now = 0;
  __u32 prev_pid = prev->tgid;
  if (!preempt && prev_state != 0 /* TASK_RUNNING: preempted, not blocked */ && prev_pid) {
    struct ss_py_proc *p = bpf_map_lookup_elem(&py_procs, &prev_pid);
    if (p) {
      now = bpf_ktime_get_ns();
      struct ss_py_stack *s = bpf_task_storage_get(&py_blocked, prev, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
      if (s) {
        s->off_ns = 0;
        if (current_stack(p, prev->pid, now, s) == 0) {
          name_codes(prev_pid, s, p);
          s->off_ns = now;
        }
      }
    }
  }
  struct ss_py_stack *s = bpf_task_storage_get(&py_blocked, next, 0, 0);
  if (s && s->off_ns) {
    if (!now) now = bpf_ktime_get_ns();
    __u64 blocked = now - s->off_ns;
    if (blocked >= offcpu_min_ns) emit(next->tgid, next->pid, s, SS_PYSTACK_OFFCPU, s->off_ns, blocked);
    s->off_ns = 0;
  }
  return 0;
}

/* A forked child has its parent's memory, so its interpreter is where the parent's is; exec replaces it. */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child) {
  if (child->pid != child->tgid) return 0;
  __u32 ppid = parent->tgid, cpid = child->tgid;
  struct ss_py_proc *p = bpf_map_lookup_elem(&py_procs, &ppid);
  if (p) bpf_map_update_elem(&py_procs, &cpid, p, BPF_ANY);
  return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm) {
  __u32 pid = p->tgid;
  bpf_map_delete_elem(&py_procs, &pid);
  return 0;
}
