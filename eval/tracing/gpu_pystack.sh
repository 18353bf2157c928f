#!/usr/bin/env bash
# GPU machine, one GPU, two parts of about 4 and 9 minutes (each under the device tool's 10-minute call): the Python stack sampler on python 3.12 (offsets checked against the live
# interpreter, a GPT-2 recording, step-time overhead), then the Table I single-GPU run with the python layer recorded
# by stack sampling. Everything lands in OUTDIR/pystack-$part.tgz (the device tool returns at most 8 files).
# Usage (device machine, repo root, stripped binaries in .carry/): bash eval/tracing/gpu_pystack.sh OUTDIR probe|table1
set -uo pipefail
out=${1:?OUTDIR}; part=${2:?probe or table1}
S=$(pwd)/.carry/stackscope
export PYTHONUNBUFFERED=1
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
w=/tmp/s4-$part; rm -rf "$w"; mkdir -p "$w" "$out"
if [[ $part == probe ]]; then
echo "== python offsets (python3 = $(readlink -f "$(command -v python3)"))"
timeout 60 python3 eval/tracing/python_offsets.py --stackscope "$S" > "$w/offsets.txt" 2>&1; echo "rc=$?" >> "$w/offsets.txt"
tail -25 "$w/offsets.txt"
echo "== python stack sampling on a GPT-2 run"
timeout 120 $S record -q --layers python,cuda --python-mode stack -o "$w/pystack.sdb" -- \
  python3 bench/overhead/gpt2_overhead.py --worker --steps 60 > "$w/pystack.log" 2>&1
$S info "$w/pystack.sdb" > "$w/pystack_info.txt" 2>&1; head -25 "$w/pystack_info.txt"
$S export "$w/pystack.sdb" --format chrome-json -o "$w/pystack.json" > /dev/null 2>&1
python3 - "$w/pystack.json" <<'PY' | tee "$w/pystack_top.txt"
import json, sys, collections
ev = json.load(open(sys.argv[1]))
ev = ev["traceEvents"] if isinstance(ev, dict) else ev
c = collections.Counter(e.get("name") for e in ev if "python" in str(e.get("cat", "")))
for n, k in c.most_common(15): print(k, n)
PY
echo "== overhead with the stack sampler (3 pairs)"
timeout 200 python3 bench/overhead/gpt2_overhead.py --stackscope "$S" --pairs 3 \
  --trace-layers cuda,nccl,torch,python,nvml,host --record-args "--python-mode stack" \
  --out "$w/overhead_pystack.json" > "$w/overhead.log" 2>&1
tail -5 "$w/overhead.log"
else
echo "== Table I single-GPU run, python layer by stack sampling"
PYMODE=stack timeout 540 bash eval/faults/gpu_table1.sh "$w/table1" gpu 11 90 300 > "$w/table1.log" 2>&1
tail -30 "$w/table1.log"
fi
rm -f "$w"/*.sdb /tmp/ft/rec.sdb
tar -C "$w" -czf "$out/pystack-$part.tgz" . && ls -la "$out"
