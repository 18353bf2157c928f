"""Step-time overhead of stackscope's tracing on a GPT-2-small-style CUDA training loop: interleaved pairs of runs,
one plain and one under `stackscope record`, each a fresh process timing the same steps. Prints and writes a JSON
with per-pair medians and the overhead (traced / plain - 1).

  python3 bench/overhead/gpt2_overhead.py --stackscope ./stackscope --pairs 5 --out /tmp/overhead.json

The traced command is built from --record (a template: {stackscope}, {layers}, {record_args}, {out}); the default
is "{stackscope} record --layers {layers} {record_args} -o {out} --". --record-args passes more record options, e.g.
the python duty cycle:

  python3 bench/overhead/gpt2_overhead.py --stackscope ./stackscope --trace-layers cuda,nccl,torch,python,nvml,host \
      --record-args "--python-mode capi --python-duty 1s/10s"

Only torch is needed."""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "eval", "tracing"))


def worker(args):
    import torch

    import gpt2_model

    device = torch.device("cuda", 0)
    torch.manual_seed(0)
    model, opt = gpt2_model.build(args, device)
    idx = torch.randint(0, args.vocab, (args.batch, args.seq), device=device)
    tgt = torch.randint(0, args.vocab, (args.batch, args.seq), device=device)
    time.sleep(args.pause)  # probes attach while the job is idle, as they would at its start
    for _ in range(args.warmup):
        gpt2_model.train_step(model, opt, idx, tgt)
    torch.cuda.synchronize()
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        gpt2_model.train_step(model, opt, idx, tgt)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    print("RESULT " + json.dumps({"step_s": times}), flush=True)


def run_one(cmd):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])["step_s"]
    raise SystemExit(f"run failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")


def main():
    import gpt2_model

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    gpt2_model.add_model_args(ap)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--pause", type=float, default=3.0)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--stackscope", default="stackscope")
    ap.add_argument("--trace-layers", default="cuda,nccl,torch,python")
    ap.add_argument("--record", default="{stackscope} record --layers {layers} {record_args} -o {out} --")
    ap.add_argument("--record-args", default="", help="more `stackscope record` options (e.g. --python-mode capi)")
    ap.add_argument("--out", default="gpt2_overhead.json")
    args = ap.parse_args()
    if args.worker:
        return worker(args)

    passthrough = ["--layers", str(args.layers), "--d-model", str(args.d_model), "--heads", str(args.heads),
                   "--seq", str(args.seq), "--batch", str(args.batch), "--vocab", str(args.vocab),
                   "--warmup", str(args.warmup), "--steps", str(args.steps), "--pause", str(args.pause)]
    plain = [sys.executable, os.path.abspath(__file__), "--worker"] + passthrough
    pairs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.pairs):
            rec = os.path.join(tmp, f"pair{i}.sdb")
            traced = shlex.split(args.record.format(stackscope=args.stackscope, layers=args.trace_layers,
                                                  record_args=args.record_args, out=rec))
            # Alternate the order so drift (clocks, thermals) does not favour one side.
            order = [("plain", plain), ("traced", traced + plain)]
            if i % 2:
                order.reverse()
            res = {name: statistics.median(run_one(cmd)) for name, cmd in order}
            res["overhead"] = res["traced"] / res["plain"] - 1.0
            res["recording_bytes"] = os.path.getsize(rec) if os.path.exists(rec) else None
            pairs.append(res)
            print(json.dumps({"pair": i, **res}), flush=True)
    summary = {
        "model": {k: getattr(args, k) for k in ("layers", "d_model", "heads", "seq", "batch")},
        "trace_layers": args.trace_layers,
        "record_args": args.record_args,
        "pairs": pairs,
        "median_plain_step_s": statistics.median(p["plain"] for p in pairs),
        "median_traced_step_s": statistics.median(p["traced"] for p in pairs),
        "median_overhead": statistics.median(p["overhead"] for p in pairs),
    }
    with open(args.out, "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps({k: v for k, v in summary.items() if k != "pairs"}))


if __name__ == "__main__":
    main()
