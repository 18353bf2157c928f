#!/usr/bin/env python3
"""A workload whose aten operator calls torch.profiler counts, for comparing with what a default (budgeted)
`stackscope record` estimates (issue 14: counts within the error the recording states). Run under the recorder:

  stackscope record -o X.sdb -- python3 eval/tracing/op_count_check.py --workload infer --seconds 60 --out T.json

Phases: build and warm up (20 steps); 20 steps under torch.profiler (CPU activity: every aten op, nested ones
included, as the operator probes see them) give the calls per step; a quiet pause (no operator runs); then the timed
loop of SECONDS (CLOCK_MONOTONIC start and end written to --out with the loop's steps and the profiler's counts per
step); another quiet pause. The truth over the loop is steps x calls per step (the steps are deterministic); --out
also has every phase's steps and times ("phases"), for the truth since a budgeted recording's first detach, which its
end note's factor is for (op_count_compare.py). Every step ends with a sync (see synced_step).

Workloads: tiny (8x8 matmul, tanh, add chains: tests/data/torch_op_counts.py, on the GPU when there is one),
infer (small-batch GPT-2-style inference: bench/overhead/small_batch_infer.py), launch (the launch-bound MLP training
step: bench/overhead/launch_bound.py). Needs only torch.

A GPU job's loop on a CPU machine: --sync-lib names a CUDA runtime (tests/progs/trace_fake's libcudart.so.13 in the
build tree) whose blocking cudaStreamSynchronize ends each step, and --step-ms spins every step to that period, as a
host waiting on its GPU does (its CPU time then follows the period, not its operators)."""
import argparse
import ctypes
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "overhead"))


def build(torch, name, device):
    if name == "tiny":
        w = torch.randn(8, 8, device=device) * 0.3
        b = torch.randn(8, 8, device=device) * 0.1
        x0 = torch.randn(8, 8, device=device)

        def step():
            x = x0
            for _ in range(10):
                x = torch.tanh(x @ w) + b
            return x
        return step
    if name == "infer":
        import gpt2_model
        big = device.type == "cuda"
        model = gpt2_model.GPT(50257 if big else 1000, 64, 768 if big else 128, 12 if big else 2,
                               12 if big else 4).to(device).eval()
        idx = torch.randint(0, model.tok.num_embeddings, (2, 64), device=device)
        pos = torch.arange(64, device=device)

        def step():
            with torch.no_grad():
                h = model.tok(idx) + model.pos(pos)
                for blk in model.blocks:
                    h = blk(h)
                return model.head(model.ln_f(h[:, -1, :])).argmax(-1)
        return step
    if name == "launch":
        import launch_bound
        args = argparse.Namespace(depth=16, width=512, batch=32)
        model, opt, x, y = launch_bound.build(torch, args, device)
        loss_fn = torch.nn.MSELoss()

        def step():
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            opt.step()
        return step
    raise SystemExit(f"unknown workload {name}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", choices=("tiny", "infer", "launch"), default="infer")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--quiet", type=float, default=3, help="pause before and after the loop (s)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--out", required=True)
    ap.add_argument("--sync-lib", help="on the CPU: a CUDA runtime whose cudaStreamSynchronize ends each step")
    ap.add_argument("--step-ms", type=float, default=0, help="spin each step to this period (with --sync-lib)")
    args = ap.parse_args()

    import torch
    from torch.profiler import ProfilerActivity, profile

    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(args.device)
    torch.manual_seed(0)
    if device.type == "cpu":
        torch.set_num_threads(1)
    step = build(torch, args.workload, device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    if args.sync_lib and device.type == "cpu":
        stream_sync, period = ctypes.CDLL(args.sync_lib).cudaStreamSynchronize, args.step_ms / 1e3

        def sync():  # the step's blocking sync, then the rest of its period waiting "on the GPU"
            stream_sync(None)
            while time.monotonic() < sync.step_start + period:
                pass

    # Every step ends with its sync, the warmup's and the profiler's too: a budgeted recording estimates unwatched
    # calls from the syncs, and a counted window on 20 steps under one sync (outside the loop) made the loop's share
    # of the counts smaller than its share of the calls: its estimate was 15.7 % low (H200, infer, main at 57e86aa).
    def synced_step():
        sync.step_start = time.monotonic()
        step()
        sync()

    phases = []  # every stretch of steps (CLOCK_MONOTONIC): the truth over any span of the recording

    def timed_steps(name, n):
        t0 = time.monotonic_ns()
        for _ in range(n):
            synced_step()
        phases.append({"phase": name, "start_ns": t0, "end_ns": time.monotonic_ns(), "steps": n})

    timed_steps("warmup", 20)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        timed_steps("profiler", 20)
    per_step = {}
    for e in prof.events():
        if e.name.startswith("aten::"):
            per_step[e.name] = per_step.get(e.name, 0) + 1
    per_step = {k: v / 20 for k, v in per_step.items()}
    time.sleep(args.quiet)
    start = time.monotonic_ns()
    steps, end_by = 0, time.monotonic() + args.seconds
    while time.monotonic() < end_by:
        synced_step()
        steps += 1
    end = time.monotonic_ns()
    phases.append({"phase": "loop", "start_ns": start, "end_ns": end, "steps": steps})
    time.sleep(args.quiet)
    out = {"workload": args.workload, "device": device.type, "steps": steps, "seconds": (end - start) / 1e9,
           "loop": {"start_ns": start, "end_ns": end, "clock": "CLOCK_MONOTONIC"}, "per_step": per_step,
           "phases": phases, "pid": os.getpid()}
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(f"done {args.workload} on {device.type}: {steps} steps in {out['seconds']:.1f} s, "
          f"{sum(per_step.values()) * steps / out['seconds']:.0f} aten calls/s", flush=True)


if __name__ == "__main__":
    main()
