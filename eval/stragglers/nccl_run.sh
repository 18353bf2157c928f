#!/bin/bash
# Straggler run on the GPU machine: 2 ranks with NCCL (mp.spawn), one slowed (a GPU-side delay inside one
# operator, or a host-side delay before the all-reduce), a Kineto trace per rank (CPU + CUDA activities),
# then the carried `build*/src/cli/stackscope stragglers`. Usage (from the repository root):
#   eval/stragglers/nccl_run.sh [SLOW_RANK=1] [FAULT=compute|edge] [STEPS=20] [DELAY_MS=20] [BACKEND=nccl]
# BACKEND=gloo runs the same logic on CPU (how it was tested off the GPU machine). Writes $OUT (default
# ./straggler-nccl-out, or $OUT when set) with rank*.json, report.json, report.html, report.txt.
set -euo pipefail
SLOW=${1:-1}; FAULT=${2:-compute}; STEPS=${3:-20}; DELAY=${4:-20}; BACKEND=${5:-nccl}
HERE=$(cd "$(dirname "$0")" && pwd); ROOT=$(cd "$HERE/../.." && pwd)
BIN=${STACKSCOPE:-$(ls -t "$ROOT"/build*/src/cli/stackscope | head -1)}
OUTDIR=${OUT:-$ROOT/straggler-nccl-out}
mkdir -p "$OUTDIR"
WIDTH=4096; BATCH=1024
if [[ "$BACKEND" != nccl ]]; then WIDTH=256; BATCH=64; fi
"${PYTHON:-/usr/bin/python3}" "$HERE/gloo_train.py" --backend "$BACKEND" --ranks 2 --steps "$STEPS" --slow-rank "$SLOW" \
  --fault "$FAULT" --delay-ms "$DELAY" --width "$WIDTH" --batch "$BATCH" --port 29650 --out "$OUTDIR"
"$BIN" stragglers --json --html "$OUTDIR/report.html" "$OUTDIR/rank0.json" "$OUTDIR/rank1.json" > "$OUTDIR/report.json"
"$BIN" stragglers "$OUTDIR/rank0.json" "$OUTDIR/rank1.json" | tee "$OUTDIR/report.txt"
"${PYTHON:-/usr/bin/python3}" - "$OUTDIR/report.json" "$SLOW" "$FAULT" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); slow = "rank" + sys.argv[2]; want = sys.argv[3]
rc = j["root_causes"][0] if j["root_causes"] else {"class": "none", "worker": "none"}
print(f"slowed {slow} ({want}) -> straggler {j['stragglers'][0]}, root cause {rc.get('kind')} {rc.get('operation')} on {rc['worker']} (class {rc['class']})")
print("RESULT", "OK" if j["stragglers"][0] == slow and rc["class"] == want else "MISS")
PY
