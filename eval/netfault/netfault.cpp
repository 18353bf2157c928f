// netfault: drop a percentage of TCP segments on one interface with a tc (clsact) BPF classifier, for a
// duration or until SIGINT/SIGTERM, then detach. Used to reproduce TCP retransmission anomalies (Reveal) and
// NCCL network faults on machines without tc/ip binaries. Statically linked libbpf so it can be carried.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <net/if.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "netfault.skel.h"
#include "netfault_counters.h"

namespace {

// Our filter's identity in the clsact hook: a fixed handle and priority, so that a later run can find and remove
// a filter left behind by a run that was killed with SIGKILL.
constexpr __u32 kFilterHandle = 0x5e1f;
constexpr __u32 kFilterPriority = 0x5e1f;

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop = true; }

struct Options {
  std::string dev = "lo";
  double drop_percent = 0;
  std::string ports;  // "A-B" or "A"; empty = every port
  double duration_s = 0;  // 0 = until a signal
  // Ingress by default: a segment shot on the sender's egress is reported back to its TCP stack as a local
  // transmit failure and resent at once without counting as a retransmission; dropping at the receiver's
  // ingress is a real loss (duplicate ACKs, fast retransmit, RTO), as on a lossy network.
  std::string direction = "ingress";
  bool json = false;
  bool cleanup_only = false;
};

struct PortRange {
  unsigned lo = 0, hi = 65535;
};

std::optional<PortRange> parse_ports(const std::string &text) {
  if (text.empty() || text == "any")
    return PortRange{};
  unsigned lo = 0, hi = 0;
  char tail = 0;
  if (std::sscanf(text.c_str(), "%u-%u%c", &lo, &hi, &tail) == 2 ||
      (std::sscanf(text.c_str(), "%u%c", &lo, &tail) == 1 && (hi = lo, true))) {
    if (lo <= hi && hi <= 65535)
      return PortRange{lo, hi};
  }
  return std::nullopt;
}

bpf_tc_hook make_hook(int ifindex, bpf_tc_attach_point point) {
  bpf_tc_hook hook{};
  hook.sz = sizeof(hook);
  hook.ifindex = ifindex;
  hook.attach_point = point;
  return hook;
}

bpf_tc_opts filter_identity() {
  bpf_tc_opts opts{};
  opts.sz = sizeof(opts);
  opts.handle = kFilterHandle;
  opts.priority = kFilterPriority;
  return opts;
}

// Removes a filter of ours left by an earlier run; true when there was one.
bool remove_stale_filter(int ifindex, bpf_tc_attach_point point) {
  bpf_tc_hook hook = make_hook(ifindex, point);
  bpf_tc_opts opts = filter_identity();
  if (bpf_tc_query(&hook, &opts) != 0)
    return false;
  opts = filter_identity();  // detach wants prog_fd/prog_id/flags zero
  return bpf_tc_detach(&hook, &opts) == 0;
}

struct Attachment {
  bpf_tc_attach_point point;
  const char *name;
  bool attached = false;
};

}  // namespace

int main(int argc, char **argv) {
  Options o;
  CLI::App app{"netfault: drop a percentage of TCP segments on an interface (tc clsact BPF), then detach.\n"
               "Needs root (CAP_NET_ADMIN + CAP_BPF). Ingress (default) drops look like network loss to TCP (retransmissions);\n"
               "egress drops on the sending host are seen by its TCP as local failures and resent silently."};
  app.add_option("--dev", o.dev, "interface")->capture_default_str();
  app.add_option("--drop-percent", o.drop_percent, "percentage of matching TCP segments to drop (0-100)")
      ->required()
      ->check(CLI::Range(0.0, 100.0));
  app.add_option("--ports", o.ports, "only segments whose source or destination port is in A-B (or A); default any");
  app.add_option("--duration", o.duration_s, "seconds to stay attached; 0 = until SIGINT/SIGTERM")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--direction", o.direction, "egress, ingress or both")
      ->check(CLI::IsMember({"egress", "ingress", "both"}))
      ->capture_default_str();
  app.add_flag("--json", o.json, "print the counters as one JSON object");
  app.add_flag("--cleanup", o.cleanup_only, "only remove a filter left by a killed run, then exit");
  // --drop-percent is not needed for --cleanup.
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--cleanup") == 0)
      app.get_option("--drop-percent")->required(false);
  CLI11_PARSE(app, argc, argv);

  const auto ports = parse_ports(o.ports);
  if (!ports) {
    std::fprintf(stderr, "netfault: --ports wants A-B or A with 0 <= A <= B <= 65535, got '%s'\n", o.ports.c_str());
    return 2;
  }
  const int ifindex = static_cast<int>(if_nametoindex(o.dev.c_str()));
  if (ifindex == 0) {
    std::fprintf(stderr, "netfault: no interface '%s': %s\n", o.dev.c_str(), std::strerror(errno));
    return 2;
  }

  std::vector<Attachment> points;
  if (o.direction != "ingress")
    points.push_back({BPF_TC_EGRESS, "egress"});
  if (o.direction != "egress")
    points.push_back({BPF_TC_INGRESS, "ingress"});

  libbpf_set_print(nullptr);  // our own messages say what failed; libbpf's would also report expected misses
  // A filter of ours still in place means an earlier run was killed before it could detach: remove it, and
  // treat the clsact qdisc as ours (that run created it), so that it goes away when we finish.
  bool found_stale = false;
  for (auto p : {BPF_TC_EGRESS, BPF_TC_INGRESS})
    found_stale |= remove_stale_filter(ifindex, p);
  if (o.cleanup_only) {
    if (found_stale) {
      bpf_tc_hook hook = make_hook(ifindex, static_cast<bpf_tc_attach_point>(BPF_TC_EGRESS | BPF_TC_INGRESS));
      bpf_tc_hook_destroy(&hook);
    }
    std::printf("netfault: %s\n", found_stale ? "removed a stale filter" : "nothing to clean up");
    return 0;
  }

  netfault_bpf *skel = netfault_bpf__open();
  if (!skel) {
    std::fprintf(stderr, "netfault: cannot open the BPF object: %s\n", std::strerror(errno));
    return 1;
  }
  skel->rodata->drop_threshold = static_cast<__u64>(o.drop_percent / 100.0 * 4294967296.0);
  skel->rodata->port_lo = static_cast<__u16>(ports->lo);
  skel->rodata->port_hi = static_cast<__u16>(ports->hi);
  if (int err = netfault_bpf__load(skel); err) {
    std::fprintf(stderr, "netfault: cannot load the BPF program (root? CAP_BPF?): %s\n", std::strerror(-err));
    netfault_bpf__destroy(skel);
    return 1;
  }

  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGHUP, on_signal);

  bool created_qdisc = found_stale;
  int rc = 0;
  for (auto &a : points) {
    bpf_tc_hook hook = make_hook(ifindex, a.point);
    int err = bpf_tc_hook_create(&hook);
    if (err == 0)
      created_qdisc = true;
    else if (err != -EEXIST) {
      std::fprintf(stderr, "netfault: cannot create the clsact hook on %s: %s\n", o.dev.c_str(), std::strerror(-err));
      rc = 1;
      break;
    }
    bpf_tc_opts opts = filter_identity();
    opts.prog_fd = bpf_program__fd(a.point == BPF_TC_EGRESS ? skel->progs.netfault_egress : skel->progs.netfault_ingress);
    if ((err = bpf_tc_attach(&hook, &opts)) != 0) {
      std::fprintf(stderr, "netfault: cannot attach on %s %s: %s\n", o.dev.c_str(), a.name, std::strerror(-err));
      rc = 1;
      break;
    }
    a.attached = true;
  }

  const auto start = std::chrono::steady_clock::now();
  if (rc == 0) {
    if (!o.json)
      std::fprintf(stderr, "netfault: dropping %.3g%% of TCP segments on %s %s, ports %u-%u%s\n", o.drop_percent,
                   o.dev.c_str(), o.direction.c_str(), ports->lo, ports->hi, o.duration_s > 0 ? "" : " until a signal");
    const auto limit = std::chrono::duration<double>(o.duration_s);
    while (!g_stop && (o.duration_s <= 0 || std::chrono::steady_clock::now() - start < limit))
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const double held_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // Detach first, then read the counters (no more updates), then drop the qdisc if we made it.
  for (auto &a : points) {
    if (!a.attached)
      continue;
    bpf_tc_hook hook = make_hook(ifindex, a.point);
    bpf_tc_opts opts = filter_identity();
    if (int err = bpf_tc_detach(&hook, &opts); err) {
      std::fprintf(stderr, "netfault: detach on %s %s failed: %s\n", o.dev.c_str(), a.name, std::strerror(-err));
      rc = 1;
    }
  }
  unsigned long long totals[NETFAULT_COUNTER_COUNT] = {};
  const int ncpu = libbpf_num_possible_cpus();
  std::vector<__u64> per_cpu(ncpu > 0 ? ncpu : 1);
  for (__u32 k = 0; k < NETFAULT_COUNTER_COUNT; ++k)
    if (bpf_map_lookup_elem(bpf_map__fd(skel->maps.counters), &k, per_cpu.data()) == 0)
      for (auto v : per_cpu)
        totals[k] += v;
  if (created_qdisc) {
    bpf_tc_hook hook = make_hook(ifindex, static_cast<bpf_tc_attach_point>(BPF_TC_EGRESS | BPF_TC_INGRESS));
    bpf_tc_hook_destroy(&hook);
  }
  netfault_bpf__destroy(skel);

  const auto dropped = totals[NETFAULT_DROPPED], passed = totals[NETFAULT_PASSED];
  if (o.json)
    std::printf("{\"dev\":\"%s\",\"direction\":\"%s\",\"drop_percent\":%g,\"port_lo\":%u,\"port_hi\":%u,"
                "\"held_s\":%.3f,\"tcp_segments\":%llu,\"dropped\":%llu,\"passed\":%llu,\"ok\":%s}\n",
                o.dev.c_str(), o.direction.c_str(), o.drop_percent, ports->lo, ports->hi, held_s, dropped + passed,
                dropped, passed, rc == 0 ? "true" : "false");
  else
    std::printf("netfault: %.1f s on %s: %llu TCP segments matched, %llu dropped (%.2f%%), %llu passed\n", held_s,
                o.dev.c_str(), dropped + passed, dropped, dropped + passed ? 100.0 * dropped / (dropped + passed) : 0.0,
                passed);
  return rc;
}
