#!/usr/bin/env bash
# GPU machine, one GPU, one device-tool call (< 10 min), issue 14 with the budgeted tracer as the default:
#   1. the fold check on the real libcudart: runtime launches must not also be recorded as driver launches
#   2. eval/tracing/gpu_overhead.sh: per-hit cost, launch-bound, GPT-2, small-batch inference, CUDA graphs
# Results under OUT: fold.txt, summary.md, overhead.tgz (+ overhead_vs_calls.svg where matplotlib exists).
# Usage (device machine, repo root, stripped binaries in .carry/, see gpu_overhead.sh): bash eval/tracing/gpu_fold_and_layer_sweep.sh OUT
set -uo pipefail
out=${1:?OUT}; mkdir -p "$out"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
ulimit -l unlimited 2>/dev/null || true
py=/opt/torch/.venv/bin/python3; [[ -x $py ]] || py=python3
t0=$SECONDS
{
  echo "== fold check (cuda layer, --budget 0)"
  timeout 90 .carry/stackscope record -q --budget 0 -o /tmp/fold.sdb --layers cuda -- "$py" -c \
    "import torch;x=torch.randn(64,64,device='cuda');[torch.tanh(x@x) for _ in range(20000)];torch.cuda.synchronize()"
  .carry/stackscope info /tmp/fold.sdb 2>&1 | head -40
  echo "== fold check, default budget"
  timeout 90 .carry/stackscope record -q -o /tmp/fold2.sdb --layers cuda -- "$py" -c \
    "import torch;x=torch.randn(64,64,device='cuda');[torch.tanh(x@x) for _ in range(20000)];torch.cuda.synchronize()"
  .carry/stackscope info /tmp/fold2.sdb 2>&1 | grep -iE "event|budget|watch|note|cuda" | head -20
  echo "  ($((SECONDS - t0)) s)"
} > "$out/fold.txt" 2>&1
cat "$out/fold.txt" | tail -40
TOTAL_S=$(( 560 - (SECONDS - t0) )) STACKSCOPE=.carry/stackscope UPROBE_COST=.carry/uprobe_cost \
  bash eval/tracing/gpu_overhead.sh "$out"
