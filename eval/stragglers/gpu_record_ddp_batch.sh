#!/usr/bin/env bash
# Stragglers from `record` (issue 15 item 7): one device command = one batch of recorded torchrun DDP jobs
# over NCCL, 5 runs of each slowed class (compute, host, gpu, cpu) in shuffled order plus 3 clean runs (23 runs, a
# random slowed rank each), analyses in the background on CPUs the job does not use (eval/stragglers/gpu_ddp.sh).
# The recordings of wrong verdicts come back (xz, 15 MiB parts) for re-scoring on the CPU VM.
#   OUT=... SEED=41 NPROC=4 bash eval/stragglers/gpu_record_ddp_batch.sh     (4 GPUs)
#   OUT=... SEED=42 NPROC=2 bash eval/stragglers/gpu_record_ddp_batch.sh     (2 GPUs; also on a 4-GPU host: ranks take GPUs 0-1)
# Prepare (CPU VM): mkdir -p .carry && strip -o .carry/stackscope build/src/cli/stackscope; carry [".carry"].
set -u
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
dir=$OUT/strag_${NPROC:-2}r_${SEED:?SEED}
mkdir -p "$dir"
miss=/tmp/strag_miss_${NPROC:-2}r_$SEED; rm -rf "$miss"  # this batch's misses only (not an earlier command's)
CLEAN_RUNS=${CLEAN_RUNS:-3} KEEP_MISSES=$miss MAX_S=${MAX_S:-500} \
  timeout 585 bash eval/stragglers/gpu_ddp.sh "$dir" "${PER:-5}" 600 4 > "$dir.log" 2>&1
if [[ -s "$dir/score.txt" ]]; then head -40 "$dir/score.txt"; else tail -20 "$dir.log"; fi
if compgen -G "$miss/*.sdb" > /dev/null; then
  (cd "$miss" && tar -cf - *.sdb | xz -T8 -3 | split -b 15M - "$dir/miss.tar.xz.")
fi
ls -la "$dir" | head
