#!/usr/bin/env bash
# Session 8, GPU step H (H100 x2): the 2-rank harness run that aborts the recorder, with an AddressSanitizer build
# of stackscope at .carry/stackscope (reports in OUT/asan.*; symbolise on the CPU VM with addr2line against
# build-asan/src/cli/stackscope).
set -u
export ASAN_OPTIONS=log_path=$OUT/asan:halt_on_error=1:detect_leaks=0:symbolize=0
bash eval/incidents/gpu_v2_2gpu.sh $OUT/v2 24 --detect --minutes 0.7 --episodes 1 --budget 200 --workloads cnn \
  > $OUT/v2.log 2>&1
tail -8 $OUT/v2.log; ls -la $OUT; head -60 $OUT/asan.* 2>/dev/null
