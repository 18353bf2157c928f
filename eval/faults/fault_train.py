#!/usr/bin/env python3
"""GPT-2-style training with faults injected at logged times: the workload of the eACGM Table I reproduction.

A clean period first (the detectors' training data), then a test period in which fault episodes alternate with
normal stretches, about --ratio : 1 normal to faulty time. Every episode is written to --log as one JSON line with
its CLOCK_MONOTONIC bounds (the clock of stackscope's events). stackscope never reads this log: eval/faults/table1.py
uses it only to label windows after the fact.

Fault classes (the layer whose detector is judged on it in parentheses):
  python_hook_delay   (python) forward hooks on the blocks sleep --delay-ms (pytorchfi-style, workload side)
  torch_op_delay      (torch)  a TorchDispatchMode sleeps --delay-ms inside mm/addmm/bmm/gelu (inside the operator)
  cuda_forced_sync    (cuda)   torch.cuda.synchronize() after every block's forward
  cuda_alloc_churn    (cuda)   empty_cache() and fresh 64-512 MiB allocations every step
  cuda_competing_stream (cuda) a second stream in a thread of this process runs large matmuls
  gpu_contention      (nvml)   a second process runs matmuls on the same GPU
  gpu_memory_hog      (nvml)   a second process takes --hog-gib of GPU memory
  nccl_throttled_peer (nccl)   rank 1 sleeps --peer-delay-ms before each step (2 ranks)
  nccl_packet_loss    (nccl)   --netfault drops --loss-percent of loopback TCP packets (NCCL over sockets on lo)

  one GPU:  python3 eval/faults/fault_train.py --fault-log /tmp/f/faults.jsonl
  two GPUs: torchrun --nproc-per-node 2 eval/faults/fault_train.py --fault-log /tmp/f/faults.jsonl --faults nccl
  CPU (tests here): /usr/bin/python3 eval/faults/fault_train.py --device cpu --small --faults python_hook_delay,torch_op_delay
"""
import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tracing"))
import gpt2_model  # noqa: E402

LAYER_OF = {
    "python_hook_delay": "python",
    "torch_op_delay": "torch",
    "cuda_forced_sync": "cuda",
    "cuda_alloc_churn": "cuda",
    "cuda_competing_stream": "cuda",
    "gpu_contention": "nvml",
    "gpu_memory_hog": "nvml",
    "nccl_throttled_peer": "nccl",
    "nccl_packet_loss": "nccl",
}
GROUPS = {
    "gpu": ["python_hook_delay", "torch_op_delay", "cuda_forced_sync", "cuda_alloc_churn", "cuda_competing_stream",
            "gpu_contention", "gpu_memory_hog"],
    "nccl": ["nccl_throttled_peer", "nccl_packet_loss"],
    "cpu": ["python_hook_delay", "torch_op_delay"],
}


def now_ns():
    return time.monotonic_ns()


def schedule(faults, t0, clean_s, test_s, episode_s, ratio, seed):
    """Episodes as (fault, start_s, end_s) relative to t0, with a normal gap of ratio * episode (+-40 %) before each.
    Layers take turns (shuffled per round) so every layer's detector gets about as many episodes; within a layer its
    fault classes take turns. Deterministic in seed, so every rank derives the same plan."""
    rng = random.Random(seed)
    by_layer = {}
    for f in faults:
        by_layer.setdefault(LAYER_OF[f], []).append(f)
    turn = {layer: 0 for layer in by_layer}
    out, t, order = [], clean_s, []
    while True:
        if not order:
            order = list(by_layer)
            rng.shuffle(order)
        gap = ratio * episode_s * rng.uniform(0.6, 1.4)
        if t + gap + episode_s > clean_s + test_s:
            return out
        layer = order.pop()
        fault = by_layer[layer][turn[layer] % len(by_layer[layer])]
        turn[layer] += 1
        t += gap
        out.append((fault, t0 + t, t0 + t + episode_s))
        t += episode_s


class Injector:
    """Turns one fault class on and off inside the training process (the second-process faults talk to a helper)."""

    def __init__(self, args, model, device, rank, helper):
        self.args, self.model, self.device, self.rank, self.helper = args, model, device, rank, helper
        self.active = None
        self.hooks, self.mode, self.stream_stop, self.netfault = [], None, None, None
        self.scratch = []

    def on(self, fault):
        a = self.args
        self.active = fault
        if fault == "python_hook_delay":
            def slow_hook(_module, _inp, _out):
                time.sleep(a.delay_ms / 1000.0)
            self.hooks = [b.register_forward_hook(slow_hook) for b in blocks_of(self.model)]
        elif fault == "torch_op_delay":
            self.mode = slow_ops_mode(a.delay_ms / 1000.0)
            self.mode.__enter__()
        elif fault == "cuda_forced_sync":
            self.hooks = [b.register_forward_hook(lambda *_: torch.cuda.synchronize()) for b in blocks_of(self.model)]
        elif fault == "cuda_competing_stream":
            self.stream_stop = threading.Event()
            threading.Thread(target=competing_stream, args=(self.device, self.stream_stop), daemon=True).start()
        elif fault in ("gpu_contention", "gpu_memory_hog"):
            self.helper.send(fault)
        elif fault == "nccl_packet_loss" and self.rank == 0:
            self.netfault = subprocess.Popen([a.netfault, "--dev", "lo", "--drop-percent", str(a.loss_percent)],
                                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def off(self):
        for h in self.hooks:
            h.remove()
        self.hooks = []
        if self.mode is not None:
            self.mode.__exit__(None, None, None)
            self.mode = None
        if self.stream_stop is not None:
            self.stream_stop.set()
            self.stream_stop = None
        if self.active in ("gpu_contention", "gpu_memory_hog"):
            self.helper.send("idle")
        if self.netfault is not None:
            self.netfault.terminate()
            self.netfault.wait()
            self.netfault = None
        self.scratch = []
        self.active = None

    def each_step(self):
        """Work a fault does once per step."""
        if self.active == "cuda_alloc_churn":
            self.scratch = []
            torch.cuda.empty_cache()
            for _ in range(4):
                mib = random.randint(64, 512)
                self.scratch.append(torch.empty(mib << 20, dtype=torch.uint8, device=self.device))
        elif self.active == "nccl_throttled_peer" and self.rank == 1:
            time.sleep(self.args.peer_delay_ms / 1000.0)


def blocks_of(model):
    m = model.module if hasattr(model, "module") else model
    return list(m.blocks)


def slow_ops_mode(delay_s):
    from torch.utils._python_dispatch import TorchDispatchMode

    slow = {"mm", "addmm", "bmm", "gelu"}

    class SlowOps(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.__name__.split(".")[0] in slow:
                time.sleep(delay_s)
            return func(*args, **(kwargs or {}))

    return SlowOps()


def competing_stream(device, stop):
    s = torch.cuda.Stream(device=device)
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    with torch.cuda.stream(s):
        while not stop.is_set():
            for _ in range(8):
                a @ a
            s.synchronize()


class SecondProcess:
    """Another process on the same GPU that idles until told to load it (its start-up, CUDA context included, is
    outside every episode, so what an episode shows is the load, not a new process appearing)."""

    def __init__(self, device_index, hog_gib):
        code = (
            "import sys,time,torch\n"
            f"d=torch.device('cuda',{device_index});a=torch.randn(8192,8192,device=d,dtype=torch.bfloat16)\n"
            "print('ready',flush=True);mode='idle';hog=None\n"
            "import select\n"
            "while True:\n"
            "  r,_,_=select.select([sys.stdin],[],[],0 if mode=='gpu_contention' else 0.2)\n"
            "  if r:\n"
            "    line=sys.stdin.readline().strip()\n"
            "    if not line or line=='quit': break\n"
            "    mode=line\n"
            "    if mode=='gpu_memory_hog': hog=torch.empty(int(" + str(hog_gib) + "*2**30),dtype=torch.uint8,device=d); hog.fill_(1)\n"
            "    if mode=='idle': hog=None; torch.cuda.empty_cache()\n"
            "  if mode=='gpu_contention':\n"
            "    for _ in range(16): a@a\n"
            "    torch.cuda.synchronize()\n")
        self.p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        if line.strip() != "ready":
            raise SystemExit("the second GPU process did not start")

    def send(self, word):
        self.p.stdin.write(word + "\n")
        self.p.stdin.flush()

    def close(self):
        try:
            self.send("quit")
            self.p.wait(timeout=10)
        except Exception:
            self.p.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    gpt2_model.add_model_args(ap)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--small", action="store_true", help="a small model (CPU runs, NCCL over sockets)")
    ap.add_argument("--faults", default="gpu", help="comma list of fault classes, or a group: gpu, nccl, cpu")
    ap.add_argument("--clean", type=float, default=90, help="seconds of clean training first (training data)")
    ap.add_argument("--test", type=float, default=360, help="seconds of the test period")
    ap.add_argument("--episode", type=float, default=4.0, help="seconds per fault episode")
    ap.add_argument("--ratio", type=float, default=5.0, help="normal : faulty time in the test period")
    ap.add_argument("--delay-ms", type=float, default=2.0, help="python_hook_delay and torch_op_delay sleep")
    ap.add_argument("--peer-delay-ms", type=float, default=30.0)
    ap.add_argument("--loss-percent", type=float, default=3.0)
    ap.add_argument("--hog-gib", type=float, default=40.0)
    ap.add_argument("--netfault", default=".carry/netfault", help="the packet-loss injector (nccl_packet_loss)")
    ap.add_argument("--pause", type=float, default=3.0, help="seconds to wait first (let probes attach)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--fault-log", required=True, help="JSON lines: one meta line, then one line per episode")
    args = ap.parse_args()
    if args.small:
        args.layers, args.d_model, args.heads, args.seq, args.batch, args.vocab = 4, 256, 4, 128, 8, 8192

    faults = []
    for f in args.faults.split(","):
        faults += GROUPS.get(f, [f])
    for f in faults:
        if f not in LAYER_OF:
            raise SystemExit(f"unknown fault class {f!r}; known: {', '.join(LAYER_OF)}")

    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    rank = int(os.environ.get("RANK", 0))
    local = int(os.environ.get("LOCAL_RANK", 0))
    if args.device == "cuda":
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    if distributed:
        if args.device == "cuda":
            dist.init_process_group("nccl", device_id=device)
        else:
            dist.init_process_group("gloo")
    torch.manual_seed(1234 + rank)
    model, opt = gpt2_model.build(args, device)
    if distributed:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local] if args.device == "cuda" else None)
    idx = torch.randint(0, args.vocab, (args.batch, args.seq), device=device)
    tgt = torch.randint(0, args.vocab, (args.batch, args.seq), device=device)
    helper = None
    if any(LAYER_OF[f] == "nvml" for f in faults) and rank == 0:
        helper = SecondProcess(local, args.hog_gib)
    time.sleep(args.pause)
    for _ in range(3):
        gpt2_model.train_step(model, opt, idx, tgt).item()

    # One time origin for every rank, so that all derive the same schedule.
    t0 = torch.tensor([now_ns()], dtype=torch.int64, device=device)
    if distributed:
        dist.broadcast(t0, 0)
    t0_s = t0.item() / 1e9
    plan = schedule(faults, t0_s, args.clean, args.test, args.episode, args.ratio, args.seed)
    end_s = t0_s + args.clean + args.test
    inj = Injector(args, model, device, rank, helper)
    os.makedirs(os.path.dirname(os.path.abspath(args.fault_log)), exist_ok=True)
    log = open(args.fault_log if not distributed else f"{args.fault_log}.rank{rank}", "w")
    log.write(json.dumps({"kind": "meta", "rank": rank, "start_ns": int(t0_s * 1e9),
                          "clean_until_ns": int((t0_s + args.clean) * 1e9), "end_ns": int(end_s * 1e9),
                          "device": args.device, "faults": faults, "episode_s": args.episode,
                          "ratio": args.ratio}) + "\n")
    log.flush()
    steps, nxt, started = 0, 0, None
    while True:
        t = now_ns() / 1e9
        if t >= end_s:
            break
        if inj.active and t >= plan[nxt - 1][2]:
            inj.off()
            log.write(json.dumps({"kind": "fault", "fault": plan[nxt - 1][0], "layer": LAYER_OF[plan[nxt - 1][0]],
                                  "rank": rank, "t0_ns": started, "t1_ns": now_ns()}) + "\n")
            log.flush()
        if not inj.active and nxt < len(plan) and t >= plan[nxt][1]:
            started = now_ns()
            print(f"rank {rank}: t={t - t0_s:.1f}s step {steps}: {plan[nxt][0]} on", flush=True)
            inj.on(plan[nxt][0])
            nxt += 1
        inj.each_step()
        gpt2_model.train_step(model, opt, idx, tgt).item()
        steps += 1
    if inj.active:
        inj.off()
        log.write(json.dumps({"kind": "fault", "fault": plan[nxt - 1][0], "layer": LAYER_OF[plan[nxt - 1][0]],
                              "rank": rank, "t0_ns": started, "t1_ns": now_ns()}) + "\n")
    log.close()
    if helper:
        helper.close()
    print(f"rank {rank}: {steps} steps, {nxt} episodes", flush=True)
    if distributed:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
