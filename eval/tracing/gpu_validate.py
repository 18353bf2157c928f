"""Ground truth for the tracer on a GPU: trains a GPT-2-small-style model on CUDA and counts, with torch.profiler,
the kernel launches, cudaMalloc calls and NCCL calls of a fixed window of steps. Writes one JSON per rank with the
counts and the window's CLOCK_MONOTONIC bounds (the clock of stackscope's events), so a recording made at the same
time can be counted over the same steps.

  single GPU:  python3 eval/tracing/gpu_validate.py --out /tmp/val
  two GPUs:    torchrun --nproc-per-node 2 eval/tracing/gpu_validate.py --out /tmp/val   (DDP: NCCL all-reduce)

Only torch is needed (python3 3.12 + torch 2.11 on the GPU machine, no extra packages)."""
import argparse
import collections
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_model  # noqa: E402
from api_names import LAUNCH_APIS, api_name  # noqa: E402



def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    gpt2_model.add_model_args(ap)
    ap.add_argument("--warmup", type=int, default=5, help="steps before the counted window")
    ap.add_argument("--steps", type=int, default=10, help="steps in the counted window")
    ap.add_argument("--empty-cache", action="store_true",
                    help="torch.cuda.empty_cache() before each counted step, so cudaMalloc is called in the window")
    ap.add_argument("--pause", type=float, default=3.0, help="seconds to wait before training (let probes attach)")
    ap.add_argument("--out", required=True, help="directory for validate_rank<R>.json")
    args = ap.parse_args()

    distributed = "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1
    rank = int(os.environ.get("RANK", 0))
    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    if distributed:
        dist.init_process_group("nccl", device_id=device)
    torch.manual_seed(1234 + rank)
    model, opt = gpt2_model.build(args, device)
    if distributed:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local])
    idx = torch.randint(0, args.vocab, (args.batch, args.seq), device=device)
    tgt = torch.randint(0, args.vocab, (args.batch, args.seq), device=device)
    time.sleep(args.pause)

    for _ in range(args.warmup):
        gpt2_model.train_step(model, opt, idx, tgt)
    torch.cuda.synchronize()
    if distributed:
        dist.barrier()
        torch.cuda.synchronize()

    steps = []
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        window_start = time.monotonic_ns()
        for s in range(args.steps):
            if args.empty_cache:
                torch.cuda.empty_cache()
            t0 = time.monotonic_ns()
            gpt2_model.train_step(model, opt, idx, tgt)
            torch.cuda.synchronize()
            steps.append({"step": s, "start_ns": t0, "end_ns": time.monotonic_ns()})
        window_end = time.monotonic_ns()

    runtime = collections.Counter()
    gpu_kernels = 0
    nccl_ops = collections.Counter()
    for ev in prof.events():
        name = ev.name
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            gpu_kernels += 1
            continue
        base = api_name(name)
        if base.startswith("cu"):
            runtime[base] += 1
        if name.startswith("nccl:"):
            nccl_ops[name] += 1
    launches = sum(runtime[n] for n in LAUNCH_APIS)
    result = {
        "rank": rank,
        "world_size": int(os.environ.get("WORLD_SIZE", 1)),
        "pid": os.getpid(),
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(device),
        "window": {"start_ns": window_start, "end_ns": window_end, "clock": "CLOCK_MONOTONIC"},
        "steps": steps,
        "counts": {
            "kernel_launch_calls": launches,
            "gpu_kernels": gpu_kernels,
            "cudaMalloc": runtime["cudaMalloc"],
            "cudaFree": runtime["cudaFree"],
            "nccl_calls": sum(nccl_ops.values()),
        },
        # DDP all-reduces every gradient once per step: the bytes the script asks NCCL to move.
        "expected_nccl_bytes": (args.steps * sum(p.numel() * p.element_size() for p in model.parameters()
                                                 if p.requires_grad)) if distributed else 0,
        "runtime_api": dict(runtime),
        "nccl_ops": dict(nccl_ops),
    }
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"validate_rank{rank}.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({"rank": rank, "counts": result["counts"], "out": path}))
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
