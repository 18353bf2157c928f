#!/usr/bin/env bash
# Issue 14 (one H100 or H200, about 5 minutes): GPT-2 (GPU-bound training, bench/overhead/gpt2_overhead.py's
# worker) bare against the default recording (`record -- CMD`: every layer, --detail budgeted, --budget 1), interleaved
# rounds, fresh processes. Target: default <= 1 %. A run of 30 timed steps (1.4 s) is shorter
# than the budget's first rebalance; here each run times STEPS steps (default 300, ~14 s) so the steady state
# dominates. The table has the median and the mean step (a duty-cycled probe slows a few % of the steps, which the
# median hides). Results under $OUT (ovh/gpt2.md, ovh/gpt2.json, gpt2.log).
# Run (lead, from the merged tree):
#   mkdir -p .carry && strip -o .carry/stackscope build/src/cli/stackscope
#   device run, carry [".carry"]: OUT=$OUT bash eval/tracing/gpu_gpt2_cost.sh
set -u
export STACKSCOPE=${STACKSCOPE:-.carry/stackscope} PYTHON=${PYTHON:-/opt/torch/.venv/bin/python3}
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
mkdir -p "$OUT/ovh"
timeout 450 bash bench/overhead/run_overhead.sh gpt2 "$OUT/ovh" "${ROUNDS:-3}" --configs "bare;default=" \
  --workload-args "--steps ${STEPS:-300} --warmup 20 --pause 1" --budget-s 420 --probe-wait 20 \
  --machine "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" > "$OUT/gpt2.log" 2>&1
echo "== gpt2 (rc $?)"
grep -B4 -A6 "^| config" "$OUT/ovh/gpt2.md" 2>/dev/null || tail -20 "$OUT/gpt2.log"
"$PYTHON" - "$OUT/ovh/gpt2.json" <<'PY' || true
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["rows"]:
    print(r["config"], "median per round:", r.get("per_round_step_s"))
for rnd in d["rounds"][:1]:
    for r in rnd:
        for n in r.get("notes", []):
            if "probes" in n or "budget" in n:
                print("  note:", n[:400])
PY
