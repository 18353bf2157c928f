#!/usr/bin/env bash
# GPU machine: the kernel layer (sched/irq/softirq/net/block counted in the kernel) on a real GPT-2 training run,
# its step-time overhead, the python C-API duty cycle's overhead, and how long `record` takes to end with the torch
# layer (recording safe vs probes detached).
# Usage (device machine, repo root, stripped binary at .carry/stackscope, python3 = torch venv):
#   bash eval/tracing/gpu_kernel_layer.sh OUTDIR [PAIRS]
set -uo pipefail
out=${1:?OUTDIR}; pairs=${2:-4}
S=$(pwd)/.carry/stackscope
export PYTHONUNBUFFERED=1
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
mkdir -p "$out" /tmp/ss

echo "== 1. kernel layer at 100 Hz on a GPT-2 run (series and their last values)"
$S record -q --layers kernel,nvml,host -i 10 -o /tmp/ss/kernel.sdb -- \
  python3 bench/overhead/gpt2_overhead.py --worker --steps 50 2>&1 | tail -2
$S info /tmp/ss/kernel.sdb | tee "$out/kernel_info.txt"
$S export /tmp/ss/kernel.sdb --format csv --what samples -q -o /tmp/ss/kernel.samples.csv
python3 - /tmp/ss/kernel.samples.csv <<'EOF' | tee "$out/kernel_series.txt"
import csv, sys
first, last, n = {}, {}, {}
with open(sys.argv[1]) as f:
    r = csv.DictReader(f)
    cols = r.fieldnames
    name_col = next(c for c in cols if c in ("series", "key", "name"))
    val_col = next(c for c in cols if c == "value")
    t_col = next(c for c in cols if c.startswith("t"))
    for row in r:
        k = row[name_col]
        if not k.startswith("kernel."):
            continue
        v, t = float(row[val_col]), float(row[t_col])
        first.setdefault(k, (t, v)); last[k] = (t, v); n[k] = n.get(k, 0) + 1
for k in sorted(last):
    (t0, v0), (t1, v1) = first[k], last[k]
    span = (t1 - t0) or 1
    print(f"{k:60s} samples {n[k]:6d}  first {v0:16.0f}  last {v1:16.0f}  delta {v1 - v0:16.0f}")
EOF

echo "== 2. step-time overhead of the kernel layer (at 10 ms) beside cuda,nccl,nvml,host"
timeout 400 python3 bench/overhead/gpt2_overhead.py --stackscope "$S" --pairs "$pairs" \
  --trace-layers cuda,nccl,kernel,nvml,host --record-args "-i 10" --out "$out/overhead_kernel.json" 2>&1 | tail -$((pairs + 1))

echo "== 3. python C-API fallback, duty-cycled 1s/10s (default), with torch"
timeout 500 python3 bench/overhead/gpt2_overhead.py --stackscope "$S" --pairs "$pairs" \
  --trace-layers cuda,nccl,torch,python,nvml,host --record-args "--python-mode capi --python-duty 1s/10s" \
  --out "$out/overhead_python_duty.json" 2>&1 | tail -$((pairs + 1))

echo "== 4. ending a recording with the torch layer: when the recording is safe vs when record exits"
$S record --layers cuda,torch,python --python-mode capi -o /tmp/ss/stop.sdb -- \
  python3 bench/overhead/gpt2_overhead.py --worker --steps 20 2>&1 >/dev/null |
  python3 -c 'import sys, time
t0 = time.time()
for line in sys.stdin:
    print(f"{time.time() - t0:7.1f}s {line}", end="", flush=True)' | grep -E "stackscope" | tee "$out/stop_timing.txt"
