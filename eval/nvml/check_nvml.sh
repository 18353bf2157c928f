#!/usr/bin/env bash
# Compares stackscope's NVML sampler with nvidia-smi on a GPU machine: both sample the same GPUs for the
# same ~5 s while a small torch load keeps GPU 0 busy, then compare_nvml.py checks means per GPU per metric
# (and that the load's process shows up in the per-process series). Exit 0: all within tolerance.
#
#   eval/nvml/check_nvml.sh [path/to/stackscope]     (default build/src/cli/stackscope)
#
# Output in $OUT (default /tmp/nvml-check): nvml.sdb, ours.csv (samples), smi.csv, report.txt.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BIN=${1:-${STACKSCOPE_BIN:-build/src/cli/stackscope}}
OUT=${OUT:-/tmp/nvml-check}
SECONDS_TO_SAMPLE=${SECONDS_TO_SAMPLE:-5}
mkdir -p "$OUT"
command -v nvidia-smi >/dev/null || { echo "check_nvml: nvidia-smi not found" >&2; exit 2; }
[ -x "$BIN" ] || { echo "check_nvml: no stackscope binary at $BIN" >&2; exit 2; }

# A GPU load, so that utilisation, power and clocks are not all idle values (optional: skipped without torch).
PY=""
for p in /opt/torch/.venv/bin/python /usr/bin/python3 python3; do
  if "$p" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then PY=$p; break; fi
done
load_pid=""
if [ -n "$PY" ]; then
  "$PY" - "$((SECONDS_TO_SAMPLE + 3))" <<'PYEOF' &
import sys, time, torch
end = time.time() + float(sys.argv[1])
a = torch.randn(4096, 4096, device="cuda"); b = torch.randn(4096, 4096, device="cuda")
while time.time() < end:
    for _ in range(20): a = (a @ b).tanh_()
    torch.cuda.synchronize()
PYEOF
  load_pid=$!
  sleep 2  # CUDA context up, clocks ramped
else
  echo "check_nvml: no torch with CUDA found: comparing idle GPUs" >&2
fi

nvidia-smi --query-gpu=index,utilization.gpu,utilization.memory,memory.used,memory.total,power.draw,temperature.gpu,clocks.sm,clocks.mem \
  --format=csv,noheader,nounits -lms 200 > "$OUT/smi.csv" &
smi_pid=$!
"$BIN" nvml --duration "$SECONDS_TO_SAMPLE" --interval-ms 100 -o "$OUT/nvml.sdb" | tee "$OUT/nvml.txt"
kill "$smi_pid" 2>/dev/null || true
wait "$smi_pid" 2>/dev/null || true
[ -n "$load_pid" ] && { kill "$load_pid" 2>/dev/null || true; wait "$load_pid" 2>/dev/null || true; }

"$BIN" export "$OUT/nvml.sdb" --format csv --what samples -q -o "$OUT/ours.csv"
python3 "$here/compare_nvml.py" "$OUT/ours.csv" "$OUT/smi.csv" ${load_pid:+--load-pid "$load_pid"} | tee "$OUT/report.txt"
