#!/usr/bin/env bash
# Issue 14 ("default recording <= 2 % on the launch-bound workload"), one H100 or H200, ~5.5 min: the
# whole recording's cost inside ONE job process (bench/overhead/attach_pairs.py via run_overhead.sh --attach-pairs):
# the workload steps until stopped, and `stackscope record --pid PID --duration D` alternates with gaps of no
# recording, K times per configuration (default; nvml,host; the uprobe layers cuda,nccl,torch,python), interleaved.
# Fresh-process pairs spread -12..+24 % on this host (bare alone 6.45-8.16 ms a step between processes): this
# compares attached steps with the gaps' steps of the same process instead.
# For the verdict on the 2 % target: eval/tracing/gpu_attach_launch_bound.sh, launch-bound and default only, ~40
# short alternations a GPU and a 95 % interval (lane kind attach:lb); 3 alternations here cannot decide it.
#   launch_bound       3 alternations x 3 configs, D 8 s, gap 4 s; first --check-probes default (record --pid and
#                      record -- JOB with --budget 0: the same BPF links, layers and series?)   cap 260 s
#   small_batch_infer  2 alternations x 3 configs, D 8 s, gap 4 s                                 cap 130 s
# Environment: OUT (required), STACKSCOPE (.carry/stackscope), PYTHON (/opt/torch/.venv/bin/python3), LB_K, SB_K,
# DUR, GAP, LB_CAP / SB_CAP (each workload's cap in s), LB_ARGS / SB_ARGS (more workload args; a CPU dry run: LB_ARGS="--width 32 --depth 4 --batch 4"
# SB_ARGS="--layers 2 --d-model 128 --heads 4 --vocab 1000").
# Files in $OUT (7): run.log, launch_bound.attach.{md,json,steps.json.xz}, small_batch_infer.attach.{md,json,
# steps.json.xz} (every held step: start ns, wall s, CPU s, to split again with other margins).
# Run (lead): mkdir -p .carry && strip -o .carry/stackscope build/src/cli/stackscope
#   device run, carry [".carry"]: OUT=$OUT bash eval/tracing/gpu_attach_pairs.sh
set -u
: "${OUT:?OUT}"
export STACKSCOPE=${STACKSCOPE:-.carry/stackscope} PYTHON=${PYTHON:-/opt/torch/.venv/bin/python3}
dur=${DUR:-8} gap=${GAP:-4}
configs="default=;nvml,host=--layers nvml,host;cuda,nccl,torch,python=--layers cuda,nccl,torch,python"
mkdir -p "$OUT"
log=$OUT/run.log
{
  date -u; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader; uptime
  git log -1 --oneline 2>/dev/null || true
} >> "$log" 2>&1
machine="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)"
machine="${machine:-no GPU}, $(nproc) cores"
for w in launch_bound:${LB_K:-3}:${LB_CAP:-260}:default small_batch_infer:${SB_K:-2}:${SB_CAP:-130}:; do
  IFS=: read -r name k cap check <<< "$w"
  more=${LB_ARGS:-}; [[ $name == small_batch_infer ]] && more=${SB_ARGS:-}
  extra=(); [[ -n $check ]] && extra=(--check-probes "$check" --check-s 4)
  # --budget-s: no recording starts that would not end before the cap (a killed run writes no summary)
  timeout "$cap" bash bench/overhead/run_overhead.sh "$name" "$OUT" "$k" --attach-pairs --duration "$dur" \
    --gap "$gap" --settle 3 --configs "$configs" --workload-args "--warmup 100 $more" --keep-steps \
    --budget-s $((cap - 15)) --machine "$machine" "${extra[@]}" >> "$log" 2>&1
  echo "$name rc $?" | tee -a "$log"
  [[ -f $OUT/$name.attach.md ]] && cat "$OUT/$name.attach.md"
done
date -u >> "$log"
