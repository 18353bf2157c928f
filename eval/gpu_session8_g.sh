#!/usr/bin/env bash
# Session 8, GPU step G (H100 x2): the 2-rank incident benchmark (cnn, DDP over NCCL) with the final build.
set -u
bash eval/incidents/gpu_v2_2gpu.sh $OUT/v2 ${SEED:-24} --detect --budget ${BUDGET:-280} --workloads cnn > $OUT/v2.log 2>&1
tail -45 $OUT/v2.log
