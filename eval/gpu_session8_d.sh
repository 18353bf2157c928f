#!/usr/bin/env bash
# Session 8, GPU step D (H100 x1): overhead of the default recording (steady CUDA probes, single-stepped price) on
# the launch-bound and small-batch inference workloads, bare vs default, interleaved rounds.
set -u
export STACKSCOPE=.carry/stackscope PYTHON=/opt/torch/.venv/bin/python3
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
for w in launch_bound small_batch_infer; do
  timeout 250 bash bench/overhead/run_overhead.sh $w $OUT/ovh ${ROUNDS:-3} --configs "bare;default=" \
    --workload-args "--pause 1" > $OUT/$w.log 2>&1
  grep -A8 "^| config" $OUT/ovh/$w.md
done
