#!/usr/bin/env bash
# Session 8, GPU step A (H100 x1): the incident benchmark's tuning seed (7) with the steady CUDA probes, recordings
# kept and brought back (xz, split in 15 MiB parts) for diagnosis on the CPU VM. Usage: bash eval/gpu_session8_a.sh
set -u
R=$(pwd)
KEEP_SDB=1 bash eval/incidents/gpu_v2_1gpu.sh $OUT/r 7 --detect --budget 400 > $OUT/gpu1.log 2>&1
cd /tmp/v2_1gpu && ls -laR > $OUT/files.txt
tar -cf - $(find . -name '*.sdb') | xz -T8 -3 | split -b 15M - $OUT/sdb.tar.xz.
ls -la $OUT
