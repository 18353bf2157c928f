#!/usr/bin/env bash
# Session 8, GPU step E (H100 x2): stragglers from real 2-rank NCCL recordings (eval/stragglers/gpu_ddp.sh, 2 runs
# per class), then the 2-GPU incident benchmark as far as the time box allows.
set -u
timeout 250 bash eval/stragglers/gpu_ddp.sh $OUT/strag ${RUNS:-2} > $OUT/strag.log 2>&1
cat $OUT/strag/score.txt 2>/dev/null | head -30
bash eval/incidents/gpu_v2_2gpu.sh $OUT/v2 ${SEED:-22} --detect --budget ${BUDGET:-290} --workloads cnn > $OUT/v2.log 2>&1
sed -n 1,20p $OUT/v2/score.md; grep -A12 "Misses and" $OUT/v2/score.md
rm -rf $OUT/strag/reports/*.info.txt
