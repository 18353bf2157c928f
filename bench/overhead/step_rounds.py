"""The timing protocol every bench/overhead workload shares (launch_bound.py, small_batch_infer.py, tiny_ops_cpu.py,
gpt2_calls.py), so that run_overhead.sh can drive any of them the same way:

  RESULT {"workload": ..., "round": i, "median_step_s": ..., ...}   one line per timed round
  CALLS {"cuda_calls_per_step": ..., "ops_per_step": ..., ...}     with --count-calls: torch.profiler's counts
  HOLDING                                                           with --hold: rounds done, steps go on until SIGINT
  HELD {"step_start_ns": [...], "step_s": [...], "step_cpu_s": ...} with --hold --time-held: the held steps, at SIGINT

A workload gives a step function (one training or inference step, or one iteration) and a sync function (waits
for the GPU; nothing on the CPU). Only torch is needed."""
import itertools
import json
import os
import signal
import statistics
import sys
import time


def add_args(ap, steps, warmup):
    ap.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"],
                    help="auto: CUDA when torch sees a GPU, else the CPU")
    ap.add_argument("--rounds", type=int, default=1, help="timed rounds in this process (one RESULT line each)")
    ap.add_argument("--steps", type=int, default=steps, help="timed steps per round")
    ap.add_argument("--warmup", type=int, default=warmup, help="untimed steps before the first round")
    ap.add_argument("--pause", type=float, default=0.0,
                    help="seconds idle before warm-up (a tracer attaching to libraries loaded late has time to)")
    ap.add_argument("--hold", action="store_true",
                    help="after the rounds print HOLDING and keep stepping until SIGINT/SIGTERM, then exit at once "
                         "(run_overhead.sh times a recorder's stop on a job still running)")
    ap.add_argument("--time-held", action="store_true",
                    help="with --hold: time every held step and print them on one HELD line when SIGINT/SIGTERM "
                         "ends the hold (attach_pairs.py compares the steps while a recorder was attached with the "
                         "others of the same process)")
    ap.add_argument("--count-calls", action="store_true",
                    help="after the rounds, count CUDA API calls, kernels and operators per step with "
                         "torch.profiler and print one CALLS line (rates from the last round's median step)")
    ap.add_argument("--profile-steps", type=int, default=20)


def pick_device(torch, name):
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no GPU")
    return torch.device(name)


def emit(tag, obj):
    print(tag + " " + json.dumps(obj), flush=True)


def time_round(step, sync, steps, starts=None, times=None, cpus=None):
    """Step times in seconds; `starts` (a list) gets each step's start in CLOCK_MONOTONIC ns, the recorder's clock,
    so overhead_rounds.py can tell the steps run while a duty-cycled probe family was attached from the others.
    steps None: until interrupted (the held steps), into the caller's `times`; `cpus` gets each step's process CPU
    time in seconds (on a loaded machine the wall time mostly measures waiting for a core; probe traps are CPU)."""
    times = [] if times is None else times
    for _ in (range(steps) if steps is not None else itertools.count()):
        t0 = time.perf_counter()
        if starts is not None:
            starts.append(time.monotonic_ns())
        c0 = time.process_time_ns() if cpus is not None else 0
        step()
        sync()
        if cpus is not None:
            cpus.append((time.process_time_ns() - c0) / 1e9)
        times.append(time.perf_counter() - t0)
    return times


def count_calls(torch, step, sync, steps):
    """Counts per step: CUDA runtime/driver API calls (the profiler's CPU-side cuda*/cu* events), GPU kernels and
    aten operators (nested ones included, as operator probes see them)."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=acts) as prof:
        for _ in range(steps):
            step()
        sync()
    api = kernels = attached_kernels = ops = 0
    names = {}
    for e in prof.events():
        on_gpu = "cuda" in str(getattr(e, "device_type", "")).lower()
        attached_kernels += len(getattr(e, "kernels", []) or [])
        if on_gpu:
            kernels += 1
        elif e.name.startswith("aten::"):
            ops += 1
        elif e.name.startswith("cu") and len(e.name) > 4 and (e.name.startswith("cuda") or e.name[2].isupper()):
            api += 1
            names[e.name] = names.get(e.name, 0) + 1
    kernels = max(kernels, attached_kernels)  # torch versions list GPU kernels as events or under their launch
    top = dict(sorted(names.items(), key=lambda kv: -kv[1])[:8])
    return {"cuda_calls_per_step": api / steps, "kernels_per_step": kernels / steps, "ops_per_step": ops / steps,
            "top_cuda_calls": {k: v / steps for k, v in top.items()}}


def run(workload, args, step, sync, extra=None):
    """Warm-up, --rounds timed rounds (RESULT lines), then --count-calls (a CALLS line, after the timed rounds so
    the profiler does not disturb them) and --hold if asked."""
    extra = dict(extra or {})
    if args.pause > 0:
        time.sleep(args.pause)
    for _ in range(args.warmup):
        step()
    sync()
    last = None
    for r in range(args.rounds):
        # The process's CPU time (user + system, every thread) per step beside the wall times: probe traps are
        # system time of the job, and on a loaded machine the wall mean mostly measures waiting for a core. The
        # median step hides a duty-cycled probe (attached for a few % of the steps); the CPU mean does not.
        cpu0 = time.process_time()
        starts = []
        times = time_round(step, sync, args.steps, starts)
        cpu = (time.process_time() - cpu0) / len(times)
        last = statistics.median(times)
        emit("RESULT", {"workload": workload, "round": r, "median_step_s": last, "steps_per_s": 1.0 / last,
                        "steps": len(times), "mean_step_s": statistics.fmean(times), "cpu_per_step_s": cpu,
                        "step_start_ns": starts, "step_s": times, **extra})
    if args.count_calls:
        import torch

        if last is None:
            last = statistics.median(time_round(step, sync, args.steps))
        c = count_calls(torch, step, sync, args.profile_steps)
        c.update({"workload": workload, "median_step_s": last, **extra,
                  "cuda_calls_per_s": c["cuda_calls_per_step"] / last, "ops_per_s": c["ops_per_step"] / last,
                  "kernels_per_s": c["kernels_per_step"] / last})
        emit("CALLS", c)
    if args.hold:
        starts, times, cpus = [], [], []

        def leave(*_):
            if args.time_held:  # the handler runs between two bytecodes: a start may lack its times
                n = min(len(starts), len(times), len(cpus))
                emit("HELD", {"workload": workload, "step_start_ns": starts[:n], "step_s": times[:n],
                              "step_cpu_s": cpus[:n], **extra})
            sys.stdout.flush()
            os._exit(0)

        signal.signal(signal.SIGINT, leave)
        signal.signal(signal.SIGTERM, leave)
        print("HOLDING", flush=True)
        if args.time_held:  # nothing is printed until the end
            time_round(step, sync, None, starts, times, cpus)
        while True:
            step()
            sync()
