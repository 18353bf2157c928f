// SPDX-License-Identifier: GPL-2.0
/* Packet-loss injection for fault reproductions: a tc (clsact) classifier that drops a given fraction of TCP
 * segments, optionally only those whose source or destination port lies in a range. Plain uapi headers (no
 * vmlinux.h): the program reads only packet bytes, so it needs no CO-RE and loads on any kernel with clsact. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <linux/tcp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "netfault_counters.h"

char LICENSE[] SEC("license") = "GPL";

/* Set by user space before load. drop_threshold is the drop probability scaled to 2^32 (so 100% = 2^32). */
const volatile __u64 drop_threshold = 0;
const volatile __u16 port_lo = 0;
const volatile __u16 port_hi = 65535;

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, NETFAULT_COUNTER_COUNT);
  __type(key, __u32);
  __type(value, __u64);
} counters SEC(".maps");

static __always_inline void count(__u32 which) {
  __u64 *c = bpf_map_lookup_elem(&counters, &which);
  if (c)
    *c += 1;
}

static __always_inline int port_matches(__u16 port) { return port >= port_lo && port <= port_hi; }

/* Offset of the TCP header in the frame, or -1 when the packet is not TCP over IPv4/IPv6 (IPv6 extension
 * headers are not followed: TCP right after the fixed header is the case that matters for NCCL and iperf-like
 * traffic). */
static __always_inline int tcp_offset(void *data, void *data_end) {
  struct ethhdr *eth = data;
  if ((void *)(eth + 1) > data_end)
    return -1;
  if (eth->h_proto == bpf_htons(ETH_P_IP)) {
    struct iphdr *ip = (void *)(eth + 1);
    if ((void *)(ip + 1) > data_end || ip->protocol != IPPROTO_TCP || ip->ihl < 5)
      return -1;
    return sizeof(*eth) + ip->ihl * 4;
  }
  if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
    struct ipv6hdr *ip6 = (void *)(eth + 1);
    if ((void *)(ip6 + 1) > data_end || ip6->nexthdr != IPPROTO_TCP)
      return -1;
    return sizeof(*eth) + sizeof(*ip6);
  }
  return -1;
}

static __always_inline int classify(struct __sk_buff *skb) {
  void *data = (void *)(long)skb->data;
  void *data_end = (void *)(long)skb->data_end;
  int off = tcp_offset(data, data_end);
  if (off < 0 || off > 120)
    return TC_ACT_OK;
  struct tcphdr *tcp = data + off;
  if ((void *)(tcp + 1) > data_end)
    return TC_ACT_OK;
  if (!port_matches(bpf_ntohs(tcp->source)) && !port_matches(bpf_ntohs(tcp->dest)))
    return TC_ACT_OK;
  if ((__u64)bpf_get_prandom_u32() < drop_threshold) {
    count(NETFAULT_DROPPED);
    return TC_ACT_SHOT;
  }
  count(NETFAULT_PASSED);
  return TC_ACT_OK;
}

SEC("tc")
int netfault_egress(struct __sk_buff *skb) { return classify(skb); }

SEC("tc")
int netfault_ingress(struct __sk_buff *skb) { return classify(skb); }
