#!/usr/bin/env bash
# Session 8, GPU step C (H100 x1): the tracing overhead rerun with the push-first calibration and steady CUDA
# probes (eval/tracing/gpu_overhead.sh, shortened), then the HTML report / Perfetto trace of a real GPU run
# (eval/report/gpu_report.sh). Usage: bash eval/gpu_session8_c.sh  (OUT set by the device tool)
set -u
STACKSCOPE=.carry/stackscope UPROBE_COST=.carry/uprobe_cost TOTAL_S=${TOTAL_S:-330} ROUNDS_LAUNCH=3 ROUNDS_GPT2=2 \
  ROUNDS_SMALL=2 bash eval/tracing/gpu_overhead.sh $OUT/ovh > $OUT/ovh.log 2>&1
timeout 220 bash eval/report/gpu_report.sh $OUT/report > $OUT/report.log 2>&1
cat $OUT/ovh/summary.md | head -60; ls -la $OUT/report
