#!/usr/bin/python3
"""Data-parallel training as a user launches it, for `stackscope record -- ...` (no profiler, no code change):
a launcher starts one process per rank with RANK / LOCAL_RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT in its
environment, as torchrun does (Debian's torch 1.13 torchrun is broken, FACTS.md), or, under torchrun, runs as
one of its workers. DistributedDataParallel over gloo (CPU) or nccl (GPU). One rank can be slowed:
  --fault compute : extra work in each step (CPU: more matmuls; GPU: a GPU-side spin of --delay-ms)
  --fault host    : the step starts late on the host (a sleep, as a slow data loader would)
  --fault cpu     : CPU contention: each rank pinned to its own CPU, a spinning process (not a rank) on the slowed
                    rank's CPU (cause class host)
  --fault gpu     : GPU contention: another process (not a rank) computes on the slowed rank's GPU all along
                    (GPU only; cause class gpu)
  --fault none    : nobody slowed
Each step ends with loss.item() (a sync on GPU). Prints "steps N" from rank 0 at the end.
  python3 ddp_job.py --ranks 2 --steps 200 --slow-rank 1 --fault compute      # launcher (CPU)
  torchrun --nproc-per-node 2 ddp_job.py --backend nccl --steps 2000 ...        # GPU
"""
import argparse
import json
import os
import subprocess
import sys
import time


def parse():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--slow-rank", type=int, default=-1)
    ap.add_argument("--fault", choices=["compute", "host", "cpu", "gpu", "none"], default="none")
    ap.add_argument("--hog", type=int, default=-1, help=argparse.SUPPRESS)  # internal: the contending process
    ap.add_argument("--spin", action="store_true", help=argparse.SUPPRESS)  # internal: the CPU contender
    ap.add_argument("--delay-ms", type=float, default=20)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--backend", default="gloo")
    ap.add_argument("--port", type=int, default=29571)
    ap.add_argument("--clock-log", default="", help="write each rank's own clocks over its steps to CLOCK_LOG.rankN "
                    "(JSON: wall, process CPU and run-queue seconds), the ground truth a test compares a verdict with")
    return ap.parse_args()


def spin():
    """The contending process of --fault cpu: spins on the CPU it inherited until its parent ends. It runs in a
    session of its own (started so) whose autogroup gets the job's nice value: in the job's autogroup, the kernel
    would hand the group's CPU share to the CPU with two of its tasks (the slowed rank and this spinner), taking it
    from the other ranks' CPUs, and on a loaded host the other ranks, not the slowed one, ended up waiting for a
    CPU (seen in the run-queue waits of the gloo runs on the shared CPU VM)."""
    parent = os.getppid()
    try:
        nice = open(f"/proc/{parent}/autogroup").read().split("nice")[1].split()[0]
        with open("/proc/self/autogroup", "w") as f:
            f.write(nice)
    except (OSError, IndexError):
        pass  # no autogroup (kernel option) or not allowed: the spinner still shares the CPU
    while os.getppid() == parent:
        for _ in range(100000):
            pass


def hog(device_index):
    """The contending process of --fault gpu: back-to-back matmuls on one GPU until its parent ends it."""
    import torch
    dev = torch.device("cuda", device_index)
    a = torch.randn(4096, 4096, device=dev)
    parent = os.getppid()
    while os.getppid() == parent:  # ends with its rank, even one that died without killing it
        for _ in range(20):
            a = torch.tanh(a @ a) * 0.5
        torch.cuda.synchronize(dev)


def launch(args):
    procs = []
    for r in range(args.ranks):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(args.ranks),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable] + sys.argv, env=env))
    return max(p.wait() for p in procs)


def train_step(model, opt, x, slow, args, torch, extra):
    if slow and args.fault == "host":
        time.sleep(args.delay_ms / 1000)  # the batch arrives late
    out = model(x)
    if slow and args.fault == "compute":
        if x.is_cuda:
            torch.cuda._sleep(int(args.delay_ms * 1.4e6))  # GPU-side spin (~1.4 GHz clock cycles per ms)
        else:
            t_end = time.perf_counter() + args.delay_ms / 1000
            while time.perf_counter() < t_end:  # extra operators on the CPU, for about delay-ms
                extra = torch.tanh(extra @ extra)
    loss = out.square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


def own_clocks():
    """This process's wall, CPU (all threads) and run-queue wait (all threads, /proc/<pid>/task/*/schedstat's
    second field) in seconds: what the machine gave the rank, whoever else ran on it."""
    run_delay = 0
    for task in os.listdir("/proc/self/task"):
        try:
            run_delay += int(open(f"/proc/self/task/{task}/schedstat").read().split()[1])
        except (OSError, IndexError, ValueError):
            pass  # a thread that ended, or a kernel without schedstats
    return {"wall_s": time.perf_counter(), "cpu_s": time.process_time(), "run_delay_s": run_delay / 1e9}


def worker(args):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank = int(os.environ["RANK"])
    torch.set_num_threads(1)
    dist.init_process_group(args.backend)
    dev = torch.device("cpu")
    if args.backend == "nccl":
        dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
        torch.cuda.set_device(dev)
    slow = rank == args.slow_rank
    contender = None
    if args.fault == "cpu" and hasattr(os, "sched_setaffinity"):
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[rank % len(cpus)]})
        if slow:  # a spinner sharing the slowed rank's CPU (no RANK: not a rank)
            env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK")}
            contender = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--spin"], env=env,
                                         start_new_session=True)
    if slow and args.fault == "gpu" and dev.type == "cuda":
        # Not a rank: no RANK in its environment. Started before DDP's first broadcast, so that the others wait
        # for its start-up there, not in a step.
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK")}
        contender = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--hog", str(dev.index)], env=env)
        time.sleep(3)  # its CUDA context up and computing before the measured steps
    torch.manual_seed(0)
    w = args.width
    model = torch.nn.Sequential(*[m for _ in range(4) for m in (torch.nn.Linear(w, w), torch.nn.ReLU())]).to(dev)
    model = DDP(model, device_ids=[dev.index] if dev.type == "cuda" else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    x = torch.randn(args.batch, w, device=dev)
    extra = torch.randn(64, 64, device=dev) * 0.01
    clocks = own_clocks()
    for _ in range(args.steps):
        train_step(model, opt, x, slow, args, torch, extra)
    if args.clock_log:
        end = own_clocks()
        with open(f"{args.clock_log}.rank{rank}", "w") as f:
            json.dump({"rank": rank, "steps": args.steps, **{k: end[k] - clocks[k] for k in end}}, f)
    if contender:
        contender.kill()
        contender.wait()
    dist.barrier()
    if rank == 0:
        print(f"steps {args.steps}", flush=True)
    dist.destroy_process_group()


def main():
    args = parse()
    if args.hog >= 0:
        hog(args.hog)
        return 0
    if args.spin:
        spin()
        return 0
    if "RANK" in os.environ:
        worker(args)
        return 0
    return launch(args)


if __name__ == "__main__":
    sys.exit(main())
