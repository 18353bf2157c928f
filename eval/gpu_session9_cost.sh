#!/usr/bin/env bash
# Session 9, issue 14 (H100 x1, under 8 minutes): does the job pay for the budget's attach/detach toggles?
# launch_bound and small_batch_infer, interleaved rounds, fresh processes:
#   bare
#   default   = `record -- CMD` (budget 1 %, period 5 s at least, up to 20 s while the toggles cost more than a
#               quarter of a family's share; records drained on a timer, no wakeup per record)
#   period1s  = `record --budget-period 1s:1s -- CMD` (the same, toggled every second as sessions 7-8 were)
# default vs period1s isolates what the toggles cost; bare vs default is the issue's target (<= 2 % launch-bound).
# Prints each table and the tracer's notes of one default and one period1s run (windows, attach/detach ms, hits
# per cycle outside the watched windows, last period). Results under $OUT (ovh/*.md, ovh/*.json, *.log).
# Run (lead, from the merged tree):
#   mkdir -p .carry && strip -o .carry/stackscope build/src/cli/stackscope
#   device run, carry [".carry"]: OUT=$OUT bash eval/gpu_session9_cost.sh
set -u
export STACKSCOPE=${STACKSCOPE:-.carry/stackscope} PYTHON=${PYTHON:-/opt/torch/.venv/bin/python3}
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
mkdir -p "$OUT/ovh"
rounds=${ROUNDS:-3}
for w in launch_bound small_batch_infer; do
  timeout 225 bash bench/overhead/run_overhead.sh $w "$OUT/ovh" "$rounds" \
    --configs "bare;default=;period1s=--budget-period 1s:1s" --workload-args "--pause 1" --budget-s 215 \
    --probe-wait 20 > "$OUT/$w.log" 2>&1
  echo "== $w (rc $?)"
  grep -A6 "^| config" "$OUT/ovh/$w.md" 2>/dev/null || tail -20 "$OUT/$w.log"
  "$PYTHON" - "$OUT/ovh/$w.json" <<'PY' || true
import json, sys
d = json.load(open(sys.argv[1]))
runs = d.get("runs") or d.get("results") or []
seen = set()
def walk(x):
    if isinstance(x, dict):
        if "notes" in x and x.get("config") not in seen:
            seen.add(x.get("config"))
            print("--", x.get("config"))
            for n in x["notes"]:
                if "watched" in n or "would cost" in n or "cost budget" in n:
                    print("  ", n)
        for v in x.values(): walk(v)
    elif isinstance(x, list):
        for v in x: walk(v)
walk(d)
PY
done
