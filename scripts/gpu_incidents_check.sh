#!/usr/bin/env bash
# GPU check of the incident engine (for the lead's GPU batch; run from the repository root on a GPU machine):
# records a small CNN training loop for ~100 s with every layer, with two planted episodes -- CPU hogs on every
# core at 30-45 s (cpu_interference, culprit "cpuhog") and a second process computing on the GPU at 60-75 s
# (gpu_contention, culprit "gpuhog") -- then writes under $OUT: analyze.txt (default report), analyze.json
# (--json), analyze_time.txt (/usr/bin/time -v of the analysis), episodes.txt (the planted CLOCK_MONOTONIC spans).
# Usage: OUT=/tmp/out scripts/gpu_incidents_check.sh [build/src/cli/stackscope]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/src/cli/stackscope}
out=${OUT:-/tmp/incidents_gpu}
mkdir -p "$out"
py=$(command -v /opt/torch/.venv/bin/python3 || command -v python3)
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing || true
work=$(mktemp -d)
cat > "$work/cnn.py" <<'PY'
import time, torch, torch.nn as nn
dev = "cuda"
m = nn.Sequential(*[nn.Sequential(nn.Conv2d(64, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU()) for _ in range(8)],
                  nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)).to(dev)
opt = torch.optim.SGD(m.parameters(), lr=0.01)
x = torch.randn(32, 64, 32, 32, device=dev); y = torch.randint(0, 10, (32,), device=dev)
t0 = time.time(); step = 0
while time.time() - t0 < 100:
    loss = nn.functional.cross_entropy(m(x), y); opt.zero_grad(); loss.backward(); opt.step()
    if step % 50 == 0: loss.item()  # a sync now and then, as real loops log
    step += 1
torch.cuda.synchronize(); print("steps", step)
PY
cat > "$work/cpuhog.py" <<'PY'
import ctypes, time, sys
ctypes.CDLL(None).prctl(15, b"cpuhog", 0, 0, 0)
t0 = time.monotonic_ns()
while time.monotonic_ns() - t0 < 15e9: pass
print(f"cpu_interference {t0} {time.monotonic_ns()}", flush=True)
PY
cat > "$work/gpuhog.py" <<'PY'
import ctypes, time, torch
ctypes.CDLL(None).prctl(15, b"gpuhog", 0, 0, 0)
a = torch.randn(8192, 8192, device="cuda"); t0 = time.monotonic_ns()
while time.monotonic_ns() - t0 < 15e9: a = (a @ a).clamp_(-1, 1)
torch.cuda.synchronize(); print(f"gpu_contention {t0} {time.monotonic_ns()}", flush=True)
PY
( sleep 30; for _ in $(seq "$(nproc)"); do "$py" "$work/cpuhog.py" & done; wait ) > "$out/episodes.txt" &
( sleep 60; "$py" "$work/gpuhog.py" ) >> "$out/episodes.txt" &
"$bin" record -q -o "$work/run.sdb" -- "$py" "$work/cnn.py" > "$out/record.txt" 2>&1 || true
wait
"$bin" info "$work/run.sdb" > "$out/info.txt" 2>&1 || true
if [ -x /usr/bin/time ]; then
  /usr/bin/time -v "$bin" analyze "$work/run.sdb" --no-store > "$out/analyze.txt" 2> "$out/analyze_time.txt" || true
else
  { time "$bin" analyze "$work/run.sdb" --no-store > "$out/analyze.txt"; } 2> "$out/analyze_time.txt" || true
fi
"$bin" analyze "$work/run.sdb" --no-store --json > "$out/analyze.json" 2>&1 || true
cat "$out/analyze.txt" "$out/episodes.txt"; grep -E "Elapsed|Maximum resident|real" "$out/analyze_time.txt" || true
# The recording too, when small enough to bring back.
[ "$(stat -c %s "$work/run.sdb")" -lt 60000000 ] && cp "$work/run.sdb" "$out/run.sdb" || true
