#!/usr/bin/env python3
"""Fault schedules of incident benchmark v2: which fault classes a run gets, and when (randomised per seed).

A run is a lead-in of normal work (the job's own baseline), then N episodes of 10-30 s, each after a normal gap of
random length, then a normal tail. Every figure is drawn from random.Random(seed), so every rank of a job derives
the same plan from the same seed and time origin, and a seed names one schedule for good.

  deal:  python3 eval/incidents/schedule.py deal --seed 7 --workloads cnn,transformer,infer \
           --classes cpu_interference,host_stall,... [--episodes 4] [--each nccl_network]
         prints one line per workload, "WORKLOAD KIND,KIND,...": the injection kinds shuffled by the seed and dealt
         in turn, so that every kind gets about as many episodes over the workloads of one seed.
  show:  python3 eval/incidents/schedule.py show --seed 7 --seconds 140 --faults a,b,c,d   (the plan, for a look)
"""
import argparse
import random
import sys

# What benchmark v2 can inject, by the kind a schedule deals: the contract's cause class of the same name
# (notes/incident_contract.md §1) unless CLASS_OF_KIND says otherwise, each with the name its injector writes as
# "fault" in the fault log. gpu_throttling is not among them: see docs/benchmarks/incidents.md.
FAULT_OF_CLASS = {
    "cpu_interference": "cpu_hog",            # processes spinning on every CPU (eval/incidents/hogs.py cpu)
    "gpu_contention": "gpu_second_process",   # a second process computing on the job's GPU (fault_train.SecondProcess)
    "host_stall": "loader_sleep",             # the job's data loader sleeps before each batch
    "pcie_pressure": "h2d_copy_storm",        # another process copying pinned host memory to the GPU (hogs.py h2d)
    "memory_pressure": "memory_hog",          # processes taking memory until reclaim (hogs.py mem)
    "storage_stall": "fsync_storm",           # fsync-heavy writes on the loader's disk (hogs.py fsync)
    "network": "loader_tcp_loss",             # loopback packet loss on the loader's TCP data path (netfault)
    "nccl_network": "nccl_socket_loss",       # loopback packet loss on NCCL's sockets, 2 ranks (netfault)
}
# The class an episode of a kind is scored by, where it is not the kind's own name. Packet loss on NCCL's sockets was
# logged as collective_slowdown at first (cdc080b changed it), but the contract defines collective_slowdown as "NCCL
# slower with no other cause", and the issue lists "NIC contention or packet loss" as a cause of its own (network):
# the collectives slow down because segments are lost, and the TCP retransmits the loss causes are the evidence that
# names it. The benchmark injects packet loss, so the right answer is network; it has no injector of a collective
# slowdown without another cause (see docs/benchmarks/incidents.md).
CLASS_OF_KIND = {"nccl_network": "network"}
CLASSES = list(FAULT_OF_CLASS)


def class_of(kind):
    """The cause class an episode of this injection kind is scored by."""
    return CLASS_OF_KIND.get(kind, kind)
# Which classes a kind of run can take: a GPU run needs a GPU for the GPU-side faults, NCCL needs two ranks.
CPU_CLASSES = ["cpu_interference", "host_stall", "memory_pressure", "storage_stall", "network"]
GPU_CLASSES = CPU_CLASSES + ["gpu_contention", "pcie_pressure"]
MULTI_GPU_CLASSES = GPU_CLASSES + ["nccl_network"]


def make_schedule(seed, seconds, faults, lead_s=20.0, tail_s=5.0, min_len=10.0, max_len=30.0, min_gap=8.0):
    """[(class, start_s, end_s)] relative to the run's time origin: len(faults) episodes in that order, or fewer
    when they cannot fit. Lengths are drawn from [min_len, max_len] and shrunk together (never below min_len) when
    they do not fit; the time left over is shared out among the gaps at random, so starts and gaps vary by seed."""
    rng = random.Random(seed)
    faults = list(faults)
    room = seconds - lead_s - tail_s
    while faults and len(faults) * (min_len + min_gap) > room:
        faults.pop()
    if not faults:
        return []
    lengths = [rng.uniform(min_len, max_len) for _ in faults]
    budget = room - len(faults) * min_gap
    if sum(lengths) > budget:  # shrink the part above min_len so that all fit
        extra = [x - min_len for x in lengths]
        scale = (budget - min_len * len(faults)) / sum(extra) if sum(extra) > 0 else 0.0
        lengths = [min_len + e * scale for e in extra]
    slack = budget - sum(lengths)
    weights = [rng.random() for _ in range(len(faults) + 1)]  # the last share goes to the tail
    total = sum(weights) or 1.0
    out, t = [], lead_s
    for f, length, w in zip(faults, lengths, weights):
        t += min_gap + slack * w / total
        out.append((f, round(t, 3), round(t + length, 3)))
        t += length
    return out


def deal(seed, classes, workloads, episodes, each=()):
    """{workload: [class, ...]}: the classes shuffled by the seed and dealt round-robin over the workloads'
    episode slots (reshuffled each round), with every class in `each` given to every workload once."""
    rng = random.Random(seed)
    plan = {w: list(each) for w in workloads}
    pool = []
    for w in workloads:
        while len(plan[w]) < episodes:
            if not pool:
                pool = [c for c in classes if c not in each] or list(classes)
                rng.shuffle(pool)
            plan[w].append(pool.pop())
        rng.shuffle(plan[w])
    return plan


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("deal")
    d.add_argument("--seed", type=int, required=True)
    d.add_argument("--workloads", required=True)
    d.add_argument("--classes", required=True)
    d.add_argument("--episodes", type=int, default=4)
    d.add_argument("--each", default="", help="kinds every workload gets once (e.g. nccl_network)")
    s = sub.add_parser("show")
    s.add_argument("--seed", type=int, required=True)
    s.add_argument("--seconds", type=float, required=True)
    s.add_argument("--faults", required=True)
    a = ap.parse_args(argv)
    if a.cmd == "deal":
        classes = [c for c in a.classes.split(",") if c]
        each = [c for c in a.each.split(",") if c]
        unknown = [c for c in classes + each if c not in FAULT_OF_CLASS]
        if unknown:
            sys.exit(f"schedule.py: unknown fault class {', '.join(unknown)}; known: {', '.join(CLASSES)}")
        for w, cs in deal(a.seed, classes, a.workloads.split(","), a.episodes, each).items():
            print(w, ",".join(cs))
    else:
        for c, t0, t1 in make_schedule(a.seed, a.seconds, a.faults.split(",")):
            print(f"{c:22s} {t0:7.1f} {t1:7.1f}  ({t1 - t0:.1f} s)")


if __name__ == "__main__":
    main()
