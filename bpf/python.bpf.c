// SPDX-License-Identifier: GPL-2.0
/* CPython probes. Where the interpreter carries USDT notes (python:function__entry/return), one record per
 * Python call with qualified name, file and line, emitted at return with its duration. Elsewhere the generic
 * call probes (call_probe.bpf.h) time configurable C-API entry points (PyObject_Call...). */
#include "call_probe.bpf.h"

#include <bpf/usdt.bpf.h>

char LICENSE[] SEC("license") = "GPL";

/* Calls shorter than this are not reported (Python makes millions of tiny calls). Set before load. */
const volatile __u64 min_duration_ns = 0;

#define SS_PY_MAX_DEPTH 128 /* power of two */

struct ss_py_thread {
  __u32 depth;
  __u32 pad;
  __u64 starts[SS_PY_MAX_DEPTH];
  __s32 lines[SS_PY_MAX_DEPTH]; /* line at entry: where the function starts */
};

struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 4096);
  __type(key, __u32);
  __type(value, struct ss_py_thread);
} py_threads SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct ss_py_thread);
} py_zero SEC(".maps");

SEC("usdt")
int BPF_USDT(py_entry, void *file, void *func, int line) {
  __u32 tid = (__u32)bpf_get_current_pid_tgid();
  struct ss_py_thread *st = bpf_map_lookup_elem(&py_threads, &tid);
  if (!st) {
    __u32 zero = 0;
    struct ss_py_thread *z = bpf_map_lookup_elem(&py_zero, &zero);
    if (!z) return 0;
    bpf_map_update_elem(&py_threads, &tid, z, BPF_NOEXIST);
    st = bpf_map_lookup_elem(&py_threads, &tid);
    if (!st) return 0;
  }
  __u32 d = st->depth;
  st->depth = d + 1;
  if (d < SS_PY_MAX_DEPTH) {
    st->lines[d & (SS_PY_MAX_DEPTH - 1)] = line;
    st->starts[d & (SS_PY_MAX_DEPTH - 1)] = bpf_ktime_get_ns();
  }
  return 0;
}

SEC("usdt")
int BPF_USDT(py_return, void *file, void *func, int line) {
  __u64 now = bpf_ktime_get_ns();
  __u64 id = bpf_get_current_pid_tgid();
  __u32 tid = (__u32)id;
  struct ss_py_thread *st = bpf_map_lookup_elem(&py_threads, &tid);
  __u64 start = now;
  __s32 first_line = line;
  __u32 flags = SS_PY_NO_ENTRY, d = 0;
  if (st && st->depth > 0) {
    d = st->depth - 1;
    st->depth = d;
    if (d >= SS_PY_MAX_DEPTH) return 0; /* deeper than we keep: its start is unknown */
    start = st->starts[d & (SS_PY_MAX_DEPTH - 1)];
    first_line = st->lines[d & (SS_PY_MAX_DEPTH - 1)];
    flags = 0;
    if (now - start < min_duration_ns) return 0;
  }
  struct ss_python_record *r = bpf_ringbuf_reserve(&events, sizeof(*r), 0);
  if (!r) {
    ss_count(SS_CNT_RB_FULL);
    return 0;
  }
  r->kind = SS_REC_PYTHON;
  r->call_id = 0;
  r->pid = id >> 32;
  r->tid = tid;
  r->start_ns = start;
  r->duration_ns = now - start;
  r->depth = d;
  r->line = first_line;
  r->flags = flags;
  r->pad = 0;
  if (bpf_probe_read_user_str(r->func, sizeof(r->func), func) < 0) r->func[0] = 0;
  if (bpf_probe_read_user_str(r->file, sizeof(r->file), file) < 0) r->file[0] = 0;
  bpf_ringbuf_submit(r, ss_submit_flags());
  return 0;
}
