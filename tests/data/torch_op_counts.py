"""A CPU loop of tiny PyTorch operators (8x8 matmul, tanh, add: the tiny-operator loop) whose operator calls
torch.profiler counts while stackscope's torch probes watch the same process (tests/trace_cost_test.cpp).

  python3 torch_op_counts.py profile N   every one of N iterations under torch.profiler
  python3 torch_op_counts.py timed S     20 iterations under torch.profiler (calls per iteration), then S seconds
                                         of iterations without it
  python3 torch_op_counts.py synced S LIB PERIOD_MS
                                         as timed, but a GPU job's loop: each iteration ends with a blocking
                                         cudaStreamSynchronize of LIB (the fake libcudart.so.13 of tests/progs/
                                         trace_fake), then spins until PERIOD_MS from its start (a GPU-bound step:
                                         CPU time at the GPU's pace, whatever the operators cost)
  python3 torch_op_counts.py late S T [N]
                                         as timed, but from T seconds into the loop every N-th iteration (default 1)
                                         also calls torch.relu once (an operator first called late: relu_iterations
                                         says how many times)

Prints "ready" once warm, waits for a line on stdin, runs, then prints "done {json}": the iterations run, and the
profiler's counts (profile) or its counts per iteration (timed), for aten::matmul, aten::mm, aten::tanh, aten::add."""
import ctypes
import json
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

OPS = ("aten::matmul", "aten::mm", "aten::tanh", "aten::add")
CHAIN = 10
torch.set_num_threads(1)
torch.manual_seed(0)
w = torch.randn(8, 8) * 0.3
b = torch.randn(8, 8) * 0.1
x0 = torch.randn(8, 8)


def step():
    x = x0
    for _ in range(CHAIN):
        x = torch.tanh(x @ w) + b
    return x


def profiled(iterations):
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(iterations):
            step()
    counts = {op: 0 for op in OPS}
    for e in prof.events():  # nested calls included, as the probes see them
        if e.name in counts:
            counts[e.name] += 1
    return counts


def main():
    mode, arg = sys.argv[1], float(sys.argv[2])
    cudart = ctypes.CDLL(sys.argv[3]) if mode == "synced" else None  # mapped before the probes attach
    period = float(sys.argv[4]) / 1e3 if mode == "synced" else 0
    step()  # warm, before the probes are attached
    print("ready", flush=True)
    sys.stdin.readline()
    if mode == "profile":
        n = int(arg)
        out = {"iterations": n, "counts": profiled(n)}
    elif mode == "synced":
        per = {op: c / 20 for op, c in profiled(20).items()}
        n, end = 20, time.monotonic() + arg
        sync = cudart.cudaStreamSynchronize
        while True:
            start = time.monotonic()
            if start >= end:
                break
            step()
            sync(None)
            n += 1
            while time.monotonic() < start + period:
                pass
        out = {"iterations": n, "per_iteration": per}
    elif mode == "late":
        per = {op: c / 20 for op, c in profiled(20).items()}
        start = time.monotonic()
        n, late, end, late_from = 20, 0, start + arg, start + float(sys.argv[3])
        every = int(sys.argv[4]) if len(sys.argv) > 4 else 1
        while True:
            now = time.monotonic()
            if now >= end:
                break
            x = step()
            if now >= late_from and n % every == 0:
                torch.relu(x)
                late += 1
            n += 1
        out = {"iterations": n, "per_iteration": per, "relu_iterations": late}
    else:
        per = {op: c / 20 for op, c in profiled(20).items()}
        n, end = 20, time.monotonic() + arg
        while time.monotonic() < end:
            step()
            n += 1
        out = {"iterations": n, "per_iteration": per}
    print("done " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
