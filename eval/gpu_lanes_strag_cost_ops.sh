#!/usr/bin/env bash
# One device command on a 4-GPU host, three lanes at once (device time is 30 min a session):
#   GPUs 0-1: the 2-rank straggler batch through `record` (eval/stragglers/gpu_record_ddp_batch.sh, NPROC=2), analyses on the
#             upper half of the CPUs as always;
#   GPU 2:    issue 14's cost pairs and in-run probe cost (eval/tracing/gpu_cost_pairs.sh), on CPUs 8-19;
#   GPU 3:    issue 14's operator counts against torch.profiler (eval/tracing/gpu_op_counts.sh), on CPUs 20-31.
# The lanes share no process: each `record` attaches its uprobes to its own job's pids (breakpoints only in those
# address spaces), so no lane pays another's probes. They do share the host's memory bandwidth and PCIe: the cost
# pairs are noisier than on an idle host; the in-run probe cost (same process) is not affected by that.
# Results: $OUT/lanes.tar.xz (every lane's files) and the straggler misses' xz parts.
#   OUT=$OUT SEED=44 bash eval/gpu_lanes_strag_cost_ops.sh      (carry [".carry"], prepared as each script says)
set -u
OUT=${OUT:?set OUT}
work=/tmp/lanes; rm -rf "$work"; mkdir -p "$work"/{strag,cost,ops}
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
(CUDA_VISIBLE_DEVICES=2 OUT=$work/cost taskset -c 8-19 bash eval/tracing/gpu_cost_pairs.sh > "$work/cost.txt" 2>&1) &
(CUDA_VISIBLE_DEVICES=3 OUT=$work/ops taskset -c 20-31 bash eval/tracing/gpu_op_counts.sh > "$work/ops.txt" 2>&1) &
CUDA_VISIBLE_DEVICES=0,1 OUT=$work/strag SEED=${SEED:-44} NPROC=2 MAX_S=${MAX_S:-480} bash eval/stragglers/gpu_record_ddp_batch.sh > "$work/strag.txt" 2>&1
wait
for f in strag cost ops; do echo "=== $f"; cat "$work/$f.txt"; done
mv "$work"/strag/strag_*/miss.tar.xz.* "$OUT"/ 2>/dev/null
tar -C "$work" -cf - . | xz -T8 -6 > "$OUT/lanes.tar.xz"
ls -la "$OUT"
