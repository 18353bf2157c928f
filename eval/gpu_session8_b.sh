#!/usr/bin/env bash
# Session 8, GPU step B (H100 x1): the incident benchmark v2 on a held-out seed with the settings frozen at this
# commit (record --detect, defaults otherwise). Usage: bash eval/gpu_session8_b.sh  (OUT set by the device tool)
set -u
bash eval/incidents/gpu_v2_1gpu.sh $OUT/v2 ${SEED:-21} --detect --budget ${BUDGET:-470} > $OUT/v2.log 2>&1
tail -40 $OUT/v2.log
