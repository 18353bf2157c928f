/* What every eBPF family object has: its ring buffer of records (SS_RINGBUF_BYTES, user space may resize it
 * before load) and per-CPU counters (enum ss_counter in events.h) that user space reads as drops and notes. */
#pragma once
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "events.h"

#ifndef SS_RINGBUF_BYTES
#define SS_RINGBUF_BYTES (8 << 20)
#endif

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, SS_RINGBUF_BYTES);
} events SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, SS_CNT_NUM);
  __type(key, __u32);
  __type(value, __u64);
} counters SEC(".maps");

static __always_inline void ss_count_add(__u32 slot, __u64 n) {
  __u64 *v = bpf_map_lookup_elem(&counters, &slot);
  if (v) *v += n;
}

static __always_inline void ss_count(__u32 slot) { ss_count_add(slot, 1); }

/* Submit flags of per-call records: the reader is woken only once the buffer is a quarter full, else it drains on
 * its timer (UprobeTracer::poll_loop). A wakeup per record (irq_work, a self-IPI: a VM exit on virtual machines)
 * cost 2.1-2.6 us a record on the CPU VM, more than the probe's traps (docs/benchmarks/probe-cost.md, uprobe_cost). */
static __always_inline __u64 ss_submit_flags(void) {
  return bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= bpf_ringbuf_query(&events, BPF_RB_RING_SIZE) / 4
             ? BPF_RB_FORCE_WAKEUP
             : BPF_RB_NO_WAKEUP;
}

/* User space clears it just before detaching duty-cycled probes (the cost budget, python C-API): calls entered
 * while it is clear are not reported, so every reported call started inside a watched window. */
__u32 capture_enabled = 1;
