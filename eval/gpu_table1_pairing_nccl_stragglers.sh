#!/usr/bin/env bash
# GPU machine with two GPUs, one call under the device tool's 10 minutes: the NCCL Table I run (eval/faults/gpu_table1.sh,
# a second seed), the CUDA pairing check with the shared pairing code (eval/tracing/check_call_pairing.sh), and
# real 2-rank NCCL straggler runs with the current ranking (eval/stragglers/nccl_run.sh). Everything lands in
# OUTDIR/table1_pairing_stragglers.tgz (the device tool returns at most 8 files).
# Usage (device machine, repo root, stripped binaries in .carry/): bash eval/gpu_table1_pairing_nccl_stragglers.sh OUTDIR [SEED] [STRAGGLER_RUNS]
set -uo pipefail
out=${1:?OUTDIR}; seed=${2:-11}; runs=${3:-4}
w=/tmp/s5; rm -rf "$w"; mkdir -p "$w" "$out"
export PYTHONUNBUFFERED=1
t0=$SECONDS
echo "== NCCL Table I run, seed $seed"
timeout 330 bash eval/faults/gpu_table1.sh "$w/table1" nccl "$seed" 60 200 > "$w/table1.log" 2>&1
tail -8 "$w/table1.log"; echo "  ($((SECONDS - t0)) s)"
rm -f /tmp/ft/rec.sdb
echo "== CUDA call pairing (shared ss_stack_push/pop)"
timeout 200 bash eval/tracing/check_call_pairing.sh > "$w/pairing.txt" 2>&1
grep -E "^==|events|cuda|torch" "$w/pairing.txt" | head -40; echo "  ($((SECONDS - t0)) s)"
echo "== NCCL stragglers, $runs runs"
for i in $(seq 1 "$runs"); do
  (( SECONDS - t0 > 520 )) && { echo "out of time before run $i"; break; }
  slow=$(( RANDOM % 2 )); fault=$([[ $(( RANDOM % 2 )) == 0 ]] && echo compute || echo edge)
  OUT=$w/strag$i PYTHON=python3 STACKSCOPE=.carry/stackscope timeout 70 \
    bash eval/stragglers/nccl_run.sh "$slow" "$fault" 20 20 nccl > "$w/strag$i.log" 2>&1
  grep -E "^slowed|^RESULT" "$w/strag$i.log" || tail -3 "$w/strag$i.log"
  rm -f "$w"/strag$i/rank*.json
done
echo "  ($((SECONDS - t0)) s)"
tar -C "$w" -czf "$out/table1_pairing_stragglers.tgz" . && ls -la "$out"
