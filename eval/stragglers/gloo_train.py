#!/usr/bin/python3
"""Tiny data-parallel training on CPU with torch.distributed (gloo on 127.0.0.1, or nccl on GPUs), one
PyTorch-profiler (Kineto) trace per rank, with one rank slowed on purpose:
  --fault compute : a delay inside one operator (the record_function "layer2") of the slow rank
  --fault edge    : a delay between the backward pass and the gradient all-reduce (no operator runs)
  --fault none    : nobody slowed
Writes OUT/rank{r}.json and OUT/truth.json ({"slow_rank": r, "fault": ...}). Used by gloo_run.sh / nccl_run.sh.
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, args):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    dist.init_process_group(args.backend, rank=rank, world_size=args.ranks)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    dev = torch.device(f"cuda:{rank}" if args.backend == "nccl" else "cpu")
    if args.backend == "nccl":
        torch.cuda.set_device(dev)
    width = args.width
    layers = torch.nn.ModuleList([torch.nn.Linear(width, width) for _ in range(4)]).to(dev)
    opt = torch.optim.SGD(layers.parameters(), lr=0.01)
    x = torch.randn(args.batch, width, device=dev)
    slow = rank == args.slow_rank
    acts = [torch.profiler.ProfilerActivity.CPU]
    if args.backend == "nccl":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    sched = torch.profiler.schedule(wait=1, warmup=1, active=args.steps)
    with torch.profiler.profile(activities=acts, schedule=sched) as prof:
        for step in range(args.steps + 2):
            h = x
            for i, layer in enumerate(layers):
                with torch.profiler.record_function(f"layer{i}"):
                    h = torch.relu(layer(h))
                    if slow and args.fault == "compute" and i == 2:
                        if args.backend == "nccl":
                            torch.cuda._sleep(int(args.delay_ms * 1e6))  # ~1 GHz cycles: a GPU-side delay
                        else:
                            time.sleep(args.delay_ms / 1000)
            with torch.profiler.record_function("loss_backward"):
                loss = h.square().mean()
                opt.zero_grad()
                loss.backward()
            if slow and args.fault == "edge":
                if args.backend == "nccl":
                    torch.cuda.synchronize()
                time.sleep(args.delay_ms / 1000)
            grads = torch.cat([p.grad.flatten() for p in layers.parameters()])
            dist.all_reduce(grads)
            with torch.profiler.record_function("optimizer_step"):
                opt.step()
            if args.backend == "nccl":
                torch.cuda.synchronize()
            prof.step()
    prof.export_chrome_trace(os.path.join(args.out, f"rank{rank}.json"))
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--slow-rank", type=int, default=-1)
    ap.add_argument("--fault", choices=["compute", "edge", "none"], default="compute")
    ap.add_argument("--delay-ms", type=float, default=40)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--backend", default="gloo")
    ap.add_argument("--port", type=int, default=29531)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "truth.json"), "w") as f:
        json.dump({"slow_rank": args.slow_rank, "fault": args.fault, "ranks": args.ranks}, f)
    mp.spawn(worker, args=(args,), nprocs=args.ranks, join=True)


if __name__ == "__main__":
    main()
