// SPDX-License-Identifier: GPL-2.0
/* The kernel layer: scheduler, IRQ/softirq, network and block tracepoints (tp_btf: BTF-typed raw tracepoints,
 * the cheapest kind) aggregated here into per-CPU counters that user space reads every interval
 * (src/trace/kernel_tracer.cpp). No record per kernel event: sched_switch alone fires ~10^5 times a second on a
 * busy host. Handlers stay a few map lookups long; no locks, no atomics (per-CPU values). */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "events.h"
#include "traced_processes.bpf.h"

char LICENSE[] SEC("license") = "GPL";

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_HASH);
  __uint(max_entries, 16384);
  __type(key, __u32);
  __type(value, struct ss_kproc_counters);
} proc_counters SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct ss_ksys_counters);
} sys_counters SEC(".maps");

/* Longest block request completed since user space last zeroed it (per CPU; user space takes the max). */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, __u64);
} block_latency_max SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_HASH);
  __uint(max_entries, 1024);
  __type(key, __u32);
  __type(value, struct ss_kirq_counters);
} irq_counters SEC(".maps");

/* Where a traced thread is in its on-CPU / runnable / blocked cycle. Task storage: freed with the task. */
struct ss_ktask {
  __u64 on_ts;   /* switched in at (0: off CPU, or not seen yet) */
  __u64 off_ts;  /* switched out at */
  __u64 wait_ts; /* runnable since (woken, or preempted) */
};
struct {
  __uint(type, BPF_MAP_TYPE_TASK_STORAGE);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, int);
  __type(value, struct ss_ktask);
} task_state SEC(".maps");

struct ss_kcpu {
  __u64 irq_ts;
  __u64 softirq_ts;
};
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct ss_kcpu);
} cpu_state SEC(".maps");

/* Block requests in flight: request address -> issue time. LRU: a completion never seen cannot leak. */
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 16384);
  __type(key, __u64);
  __type(value, __u64);
} block_inflight SEC(".maps");

static __always_inline struct ss_kproc_counters *proc_of(__u32 tgid) {
  __u32 key = all_processes ? 0 : tgid;
  struct ss_kproc_counters *c = bpf_map_lookup_elem(&proc_counters, &key);
  if (c) return c;
  struct ss_kproc_counters zero = {};
  bpf_map_update_elem(&proc_counters, &key, &zero, BPF_NOEXIST);
  return bpf_map_lookup_elem(&proc_counters, &key);
}

static __always_inline struct ss_ksys_counters *sys(void) {
  __u32 zero = 0;
  return bpf_map_lookup_elem(&sys_counters, &zero);
}

static __always_inline struct ss_kcpu *cpu(void) {
  __u32 zero = 0;
  return bpf_map_lookup_elem(&cpu_state, &zero);
}

/* ---- scheduler ------------------------------------------------------------------------------------------- */

SEC("tp_btf/sched_switch")
int BPF_PROG(on_switch, bool preempt, struct task_struct *prev, struct task_struct *next, unsigned int prev_state) {
  __u64 now = bpf_ktime_get_ns();
  if (prev->pid != 0 && is_traced(prev->tgid)) {
    struct ss_ktask *t = bpf_task_storage_get(&task_state, prev, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
    struct ss_kproc_counters *c = proc_of(prev->tgid);
    if (t && c) {
      if (t->on_ts) c->oncpu_ns += now - t->on_ts;
      t->on_ts = 0;
      t->off_ts = now;
      if (preempt || prev_state == 0 /* TASK_RUNNING */) {
        c->involuntary_switches += 1;
        t->wait_ts = now; /* still runnable: waiting for a CPU from now on */
      } else {
        c->voluntary_switches += 1;
        t->wait_ts = 0;
      }
    }
  }
  if (next->pid != 0 && is_traced(next->tgid)) {
    struct ss_ktask *t = bpf_task_storage_get(&task_state, next, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
    struct ss_kproc_counters *c = proc_of(next->tgid);
    if (t && c) {
      __u64 runnable_from = t->wait_ts ? t->wait_ts : now; /* no wakeup seen: all of it counts as blocked */
      if (t->off_ts && runnable_from >= t->off_ts) c->blocked_ns += runnable_from - t->off_ts;
      if (t->off_ts || t->wait_ts) c->runq_ns += now - runnable_from; /* a new task has only wait_ts */
      t->on_ts = now;
      t->off_ts = 0;
      t->wait_ts = 0;
    }
  }
  return 0;
}

static __always_inline void woken(struct task_struct *p) {
  if (!is_traced(p->tgid)) return;
  struct ss_ktask *t = bpf_task_storage_get(&task_state, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
  if (t && !t->on_ts && !t->wait_ts) t->wait_ts = bpf_ktime_get_ns();
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(on_wakeup, struct task_struct *p) {
  woken(p);
  return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(on_wakeup_new, struct task_struct *p) {
  woken(p);
  return 0;
}

SEC("tp_btf/sched_migrate_task")
int BPF_PROG(on_migrate, struct task_struct *p, int dest_cpu) {
  if (!is_traced(p->tgid)) return 0;
  struct ss_kproc_counters *c = proc_of(p->tgid);
  if (c) c->migrations += 1;
  return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child) {
  if (child->pid == child->tgid) inherit_traced(parent->tgid, child->tgid);
  return 0;
}

/* ---- interrupts ------------------------------------------------------------------------------------------ */

SEC("tp_btf/irq_handler_entry")
int BPF_PROG(on_irq_entry, int irq, struct irqaction *action) {
  struct ss_kcpu *s = cpu();
  if (s) s->irq_ts = bpf_ktime_get_ns();
  return 0;
}

SEC("tp_btf/irq_handler_exit")
int BPF_PROG(on_irq_exit, int irq, struct irqaction *action, int ret) {
  struct ss_kcpu *s = cpu();
  if (!s || !s->irq_ts) return 0;
  __u64 d = bpf_ktime_get_ns() - s->irq_ts;
  s->irq_ts = 0;
  struct ss_ksys_counters *g = sys();
  if (g) {
    g->hardirq_count += 1;
    g->hardirq_ns += d;
  }
  __u32 key = irq;
  struct ss_kirq_counters *c = bpf_map_lookup_elem(&irq_counters, &key);
  if (!c) {
    struct ss_kirq_counters zero = {};
    bpf_map_update_elem(&irq_counters, &key, &zero, BPF_NOEXIST);
    c = bpf_map_lookup_elem(&irq_counters, &key);
    if (!c) return 0;
  }
  c->count += 1;
  c->ns += d;
  return 0;
}

SEC("tp_btf/softirq_entry")
int BPF_PROG(on_softirq_entry, unsigned int vec) {
  struct ss_kcpu *s = cpu();
  if (s) s->softirq_ts = bpf_ktime_get_ns();
  return 0;
}

SEC("tp_btf/softirq_exit")
int BPF_PROG(on_softirq_exit, unsigned int vec) {
  struct ss_kcpu *s = cpu();
  if (!s || !s->softirq_ts) return 0;
  __u64 d = bpf_ktime_get_ns() - s->softirq_ts; /* includes hard IRQs taken meanwhile */
  s->softirq_ts = 0;
  struct ss_ksys_counters *g = sys();
  if (g && vec < SS_NR_SOFTIRQS) {
    g->softirq_count[vec] += 1;
    g->softirq_ns[vec] += d;
  }
  return 0;
}

/* ---- network --------------------------------------------------------------------------------------------- */

SEC("tp_btf/net_dev_xmit")
int BPF_PROG(on_net_xmit, struct sk_buff *skb, int rc, struct net_device *dev, unsigned int skb_len) {
  struct ss_ksys_counters *g = sys();
  if (g && rc == 0 /* NETDEV_TX_OK */) {
    g->net_tx_packets += 1;
    g->net_tx_bytes += skb_len;
  }
  return 0;
}

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(on_net_receive, struct sk_buff *skb) {
  struct ss_ksys_counters *g = sys();
  if (g) {
    g->net_rx_packets += 1;
    g->net_rx_bytes += skb->len;
  }
  return 0;
}

SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(on_tcp_retransmit) {
  struct ss_ksys_counters *g = sys();
  if (g) g->tcp_retransmits += 1;
  return 0;
}

/* ---- block ----------------------------------------------------------------------------------------------- */

SEC("tp_btf/block_rq_issue")
int BPF_PROG(on_block_issue, struct request *rq) {
  __u64 key = (__u64)rq, now = bpf_ktime_get_ns();
  bpf_map_update_elem(&block_inflight, &key, &now, BPF_ANY);
  struct ss_ksys_counters *g = sys();
  if (g) {
    g->block_issued += 1;
    g->block_issued_bytes += rq->__data_len;
  }
  return 0;
}

SEC("tp_btf/block_rq_complete")
int BPF_PROG(on_block_complete, struct request *rq, blk_status_t error, unsigned int nr_bytes) {
  __u64 key = (__u64)rq;
  __u64 *issued = bpf_map_lookup_elem(&block_inflight, &key);
  if (!issued) return 0;
  __u64 lat = bpf_ktime_get_ns() - *issued;
  bpf_map_delete_elem(&block_inflight, &key);
  struct ss_ksys_counters *g = sys();
  if (g) {
    g->block_completed += 1;
    g->block_latency_ns += lat;
  }
  __u32 zero = 0;
  __u64 *mx = bpf_map_lookup_elem(&block_latency_max, &zero);
  if (mx && lat > *mx) *mx = lat;
  return 0;
}
