#!/usr/bin/env bash
# Incident benchmark v2 on one GPU, one device-tool command (about 9 min): the three workloads (cnn, transformer,
# infer), 2 min each with 4 fault episodes dealt from 7 classes (cpu_interference, gpu_contention, host_stall,
# pcie_pressure, memory_pressure, storage_stall, network), recorded and analysed with stackscope's defaults, then
# scored. A short clean run follows if the time budget allows it. Results under OUT: run.log, score.md, score.json
# and v2_1gpu_sSEED.tgz (fault logs, analyses, workload logs; no recordings).
# Usage (device machine, repo root, stripped binaries at .carry/stackscope and .carry/netfault, as root):
#   bash eval/incidents/gpu_v2_1gpu.sh OUT SEED [run_v2.sh options, e.g. --detect]
set -uo pipefail
out=${1:?OUT}; seed=${2:-7}; shift 2 || shift $#
mkdir -p "$out"; w=/tmp/v2_1gpu; rm -rf "$w"; mkdir -p "$w"
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true  # the machine's setup, as a user's host has it
nvidia-smi -L > "$w/gpu.txt" 2>&1
DETACH_GRACE=${DETACH_GRACE:-10} bash eval/incidents/run_v2.sh .carry/stackscope "$w" --gpus 1 --seeds "$seed" \
  --workloads cnn,transformer,infer --minutes 2 --episodes 4 --clean-minutes 1 --budget 500 "$@" \
  2>&1 | tee "$out/run.log"
cp "$w/score.md" "$w/score.json" "$out/" 2>/dev/null
tar -C "$w" -czf "$out/v2_1gpu_s$seed.tgz" --exclude='*.sdb' --exclude='*.sdb-*' .
ls -la "$out"
