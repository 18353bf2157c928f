#!/usr/bin/env bash
# Issue 15, 2-rank batches twice as fast: two batches side by side on a 4-GPU host (one device command, ~9.5 min,
# about 34 runs), each on two GPUs and 16 CPUs of its own, analyses on the upper half of the CPUs, rendezvous ports
# apart. Each batch as eval/stragglers/gpu_record_ddp_batch.sh runs it (5 runs of each slowed class, CLEAN_RUNS clean runs,
# shuffled by its seed). Results: $OUT/two_lanes.tar.xz (both batches' scores, results and reports) and the wrong
# verdicts' recordings as xz parts ($OUT/miss_SEED.tar.xz.*).
#   OUT=$OUT SEED=46 bash eval/gpu_strag_two_lanes.sh        (seeds SEED and SEED+1; carry [".carry"])
set -u
OUT=${OUT:?set OUT}; seed=${SEED:?SEED}
w=/tmp/two_lanes; rm -rf "$w"; mkdir -p "$w"
(CUDA_VISIBLE_DEVICES=0,1 PORT_BASE=29700 BG_CPUS=32-63 OUT=$w SEED=$seed NPROC=2 CLEAN_RUNS=${CLEAN_RUNS:-4} \
  MAX_S=${MAX_S:-480} taskset -c 0-15 bash eval/stragglers/gpu_record_ddp_batch.sh > "$w/lane_a.txt" 2>&1) &
CUDA_VISIBLE_DEVICES=2,3 PORT_BASE=29800 BG_CPUS=32-63 OUT=$w SEED=$((seed + 1)) NPROC=2 CLEAN_RUNS=${CLEAN_RUNS:-4} \
  MAX_S=${MAX_S:-480} taskset -c 16-31 bash eval/stragglers/gpu_record_ddp_batch.sh > "$w/lane_b.txt" 2>&1
wait
head -9 "$w/lane_a.txt" "$w/lane_b.txt"
for s in "$seed" "$((seed + 1))"; do
  for p in "$w/strag_2r_$s"/miss.tar.xz.*; do [[ -e $p ]] && mv "$p" "$OUT/miss_${s}.${p##*/}"; done
done
tar -C "$w" -cf - . | xz -T8 > "$OUT/two_lanes.tar.xz"
ls -la "$OUT"
