#!/usr/bin/env bash
# Session 10, stragglers from `record` (issue 15): one batch of recorded torchrun DDP jobs over NCCL on this
# machine's GPUs, 5 classes in shuffled order, 2 runs each (clean; extra GPU work = compute; late step start =
# host; another process computing on the slowed rank's GPU = gpu; a spinner on its CPU = cpu, class host), each
# scored on the verdict's kind, rank and cause.
# Usage (repository root, stripped binary at .carry/stackscope), one device command per batch (about 8-9 min):
#   OUT=... SEED=21 bash eval/gpu_session10_strag.sh            (2 GPUs; SEED=22, 23 for more batches)
#   OUT=... SEED=31 NPROC=4 bash eval/gpu_session10_strag.sh    (4 GPUs)
# Writes $OUT/strag_$SEED/{score.txt,results.jsonl,reports/}; prints score.txt.
set -u
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
dir=$OUT/strag_${SEED:-21}
MAX_S=${MAX_S:-470} SEED=${SEED:-21} timeout 580 bash eval/stragglers/gpu_ddp.sh "$dir" 2 600 4 > "$dir.log" 2>&1
# The log's tail when no score was written (the batch cut by the timeout, or the harness failed)
if [[ -s "$dir/score.txt" ]]; then head -40 "$dir/score.txt"; else tail -20 "$dir.log"; fi
rm -f "$dir"/reports/*.info.txt
