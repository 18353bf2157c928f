#!/usr/bin/env bash
# Issue 14 ("default recording <= 2 % on the launch-bound workload"), the precise mode: one GPU, the
# launch-bound workload only, `default` against no recorder only, as many short alternations as the cap allows
# (bench/overhead/attach_pairs.py via run_overhead.sh --attach-pairs), and the verdict from the precise estimate
# (bench/overhead/bracketed_cost.py): each recording's steady span (from the budget's first detach, whole
# duty-cycle periods) against the line through the gaps before and after it, a 95 % interval over the alternations,
# and the same estimator on the gaps alone (the method's false offset).
# Why: 3 alternations a configuration pooled against all gaps read -5.9 % / -0.5 % while the job's own step time moved
# 9-13 % from one gap to the next; the target is only shown by averaging many alternations whose neighbours cancel
# drift.
# Sizes: DUR 8 s (the start-up look, up to ~1 s of a torch window, one 5 s budget period and the margins must fit:
# a shorter recording holds no whole period and is left out), GAP 3 s; on the GPU a cycle is ~12.5 s (attach
# ~0.7 s, recording, ~0.5 s to detach and read it), so ~40 alternations in 520 s; 2 lanes give ~80 together
# (attach_pairs.py --combine A.json B.json pools them).
# Environment: OUT (required), STACKSCOPE (.carry/stackscope), PYTHON (/opt/torch/.venv/bin/python3), DUR, GAP,
# LB_CAP (s for the whole run, default 520: no recording starts that would not end 15 s before it), LB_ARGS (more
# workload args; a CPU dry run: LB_ARGS="--device cpu --width 32 --depth 4 --batch 4"), SHAM=1 (every other
# alternation an A/A one: no recorder, the last real timeline replayed; halves the real ones), TARGET (0.02).
# Files in $OUT (4): run.log, launch_bound.attach.{md,json,steps.json.xz}.
# Run (lead): mkdir -p .carry && strip -o .carry/stackscope build/src/cli/stackscope
#   device run, carry [".carry"]: OUT=$OUT bash eval/tracing/gpu_attach_launch_bound.sh   (or lane kind attach:lb in
#   eval/gpu_lanes.sh)
set -u
: "${OUT:?OUT}"
export STACKSCOPE=${STACKSCOPE:-.carry/stackscope} PYTHON=${PYTHON:-/opt/torch/.venv/bin/python3}
dur=${DUR:-8} gap=${GAP:-3} cap=${LB_CAP:-520}
configs="default="; [[ ${SHAM:-0} == 1 ]] && configs="default=;sham="
mkdir -p "$OUT"
log=$OUT/run.log
{
  date -u; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader 2>/dev/null; uptime
  git log -1 --oneline 2>/dev/null || true
} >> "$log" 2>&1
machine="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)"
machine="${machine:-no GPU}, $(nproc) cores"
# --rounds 1000: the cap ends it (--budget-s: no recording starts that would not end, with its last gap, before it)
timeout "$cap" bash bench/overhead/run_overhead.sh launch_bound "$OUT" 1000 --attach-pairs --duration "$dur" \
  --gap "$gap" --settle 3 --attach-margin 0.5 --configs "$configs" --target "${TARGET:-0.02}" \
  --workload-args "--warmup 100 ${LB_ARGS:-}" --keep-steps --budget-s $((cap - 15)) --machine "$machine" \
  >> "$log" 2>&1
echo "launch_bound rc $?" | tee -a "$log"
[[ -f $OUT/launch_bound.attach.md ]] && cat "$OUT/launch_bound.attach.md"
date -u >> "$log"
