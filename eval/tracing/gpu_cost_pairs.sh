#!/usr/bin/env bash
# Issue 14 (one H100 or H200): the default recording against bare on the launch-bound and small-batch
# workloads with runs long enough for the budget's steady state, interleaved rounds, fresh processes. ABLATE=1
# instead runs the 200-step layer ablation (bare, default, no nvml, no uprobes, nvml+host, kernel only).
# The verdict is the in-run split (overhead_rounds.py split_steps: the steps after the budget's first
# detach, those no duty-cycled probe touched against all, in the same process), the fresh-process pairs beside it
# with the bare runs' spread. The budget's duty cycle is 5 s and its first detach comes seconds into the job, so the
# timed sections are longer: launch-bound 2,500 steps (~18 s at 7 ms), small-batch 4,000 (~11 s at 2.7 ms), after
# 100 warm-up: 2-3 windows of each cycled family after the first detach (1,500 steps held 0-2). Defaults fit one
# device command in under 9 min: LB_ROUNDS=4 (390 s cap), SB_ROUNDS=2 (140 s cap); LB_STEPS, SB_STEPS. KEEP=1 also brings back launch-bound's last default recording and its step times (OUT/ovh/*.sdb).
# Results under $OUT/ovh/*.{md,json}; per-round medians and splits printed.
# Run (lead): mkdir -p .carry && strip -o .carry/stackscope build/src/cli/stackscope
#   device run, carry [".carry"]: OUT=$OUT bash eval/tracing/gpu_cost_pairs.sh
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
    for r in rnd:  # the in-run split of each traced run
        if "steps_timed" in r or r.get("split_error"):
            print("  split", r["config"], {k: r.get(k) for k in (
                "probe_cost", "probe_cost_se", "cost_watched", "cost_edge", "steps_timed", "steps_startup",
                "steps_watched", "steps_edge", "steps_unwatched", "first_detach_after_first_step_s",
                "windows_in_timed", "families_cycled", "attached_throughout", "split_error") if k in r})
PY
}
if [[ ${ABLATE:-0} == 1 ]]; then
  timeout 400 bash bench/overhead/run_overhead.sh launch_bound "$OUT/ovh" 3 --configs \
    "bare;default=;no_nvml=--layers cuda,nccl,torch,python,kernel,host;no_uprobes=--layers python,kernel,nvml,host;nvml_host=--layers nvml,host;kernel_only=--layers kernel" \
    --workload-args "--pause 1" --probe-wait 20 > "$OUT/ablate.log" 2>&1
  grep -A9 "^| config" "$OUT/ovh/launch_bound.md"; rounds "$OUT/ovh/launch_bound.json"
  exit 0
fi
for w in launch_bound:${LB_ROUNDS:-4}:390:${LB_STEPS:-2500} small_batch_infer:${SB_ROUNDS:-2}:140:${SB_STEPS:-4000}; do
  IFS=: read -r n r t steps <<< "$w"
  keep=(); [[ ${KEEP:-0} == 1 && $n == launch_bound ]] && keep=(--keep-recordings)  # 8 files come back at most
  # --budget-s: no round starts that would not end before the timeout (a killed round loses its pair)
  timeout "$t" bash bench/overhead/run_overhead.sh "$n" "$OUT/ovh" "$r" --configs "bare;default=" \
    --workload-args "--pause 1 --steps $steps --warmup 100" --probe-wait 20 --budget-s $((t - 15)) "${keep[@]}" \
    > "$OUT/$n.log" 2>&1
  echo "$n rc $?"; grep -A4 "^| config" "$OUT/ovh/$n.md"; grep -A1 "Cost, " "$OUT/ovh/$n.md"; rounds "$OUT/ovh/$n.json"
done
