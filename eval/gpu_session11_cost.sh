#!/usr/bin/env bash
# Session 11, issue 14 (one H100 or H200): the default recording against bare on the launch-bound and small-batch
# workloads with runs long enough for the budget's steady state (1,500 timed steps after 100 warm-up, ~12 s; the
# 200-step runs of eval/gpu_session8_d.sh time ~1.3 s, mostly the budget's first seconds), interleaved rounds, fresh
# processes. ABLATE=1 instead runs the 200-step layer ablation (bare, default, no nvml, no uprobes, nvml+host,
# kernel only). Results under $OUT/ovh/*.{md,json}; per-round medians printed.
# Run (lead): mkdir -p .carry && strip -o .carry/stackscope build/src/cli/stackscope
#   device run, carry [".carry"]: OUT=$OUT bash eval/gpu_session11_cost.sh
set -u
export STACKSCOPE=${STACKSCOPE:-.carry/stackscope} PYTHON=${PYTHON:-/opt/torch/.venv/bin/python3}
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
nvidia-smi --query-gpu=name --format=csv,noheader
rounds() {
  python3 - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for i, rnd in enumerate(d["rounds"]):
    print(i, [(r.get("config"), round(r.get("median_step_s", 0) * 1e3, 3), round((r.get("cpu_per_step_s") or 0) * 1e3, 3))
              for r in rnd])
PY
}
if [[ ${ABLATE:-0} == 1 ]]; then
  timeout 400 bash bench/overhead/run_overhead.sh launch_bound "$OUT/ovh" 3 --configs \
    "bare;default=;no_nvml=--layers cuda,nccl,torch,python,kernel,host;no_uprobes=--layers python,kernel,nvml,host;nvml_host=--layers nvml,host;kernel_only=--layers kernel" \
    --workload-args "--pause 1" --probe-wait 20 > "$OUT/ablate.log" 2>&1
  grep -A9 "^| config" "$OUT/ovh/launch_bound.md"; rounds "$OUT/ovh/launch_bound.json"
  exit 0
fi
for w in launch_bound:${LB_ROUNDS:-4}:380 small_batch_infer:${SB_ROUNDS:-3}:150; do
  IFS=: read -r n r t <<< "$w"
  timeout "$t" bash bench/overhead/run_overhead.sh "$n" "$OUT/ovh" "$r" --configs "bare;default=" \
    --workload-args "--pause 1 --steps 1500 --warmup 100" --probe-wait 20 > "$OUT/$n.log" 2>&1
  echo "$n rc $?"; grep -A4 "^| config" "$OUT/ovh/$n.md"; rounds "$OUT/ovh/$n.json"
done
