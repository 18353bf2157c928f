#!/usr/bin/env bash
# Incident benchmark v2 on two GPUs, one device-tool command (about 9 min): cnn and transformer as 2-rank DDP jobs
# (torchrun; NCCL forced onto TCP sockets on loopback), 3 min each with 5 fault episodes, one of them packet loss
# on NCCL's path (nccl_network: netfault drops NCCL's loopback packets; scored as network, see schedule.py
# CLASS_OF_KIND), the rest dealt from the one-GPU classes; recorded and
# analysed with stackscope's defaults, then scored. Results under OUT: run.log, score.md, score.json and
# v2_2gpu_sSEED.tgz (fault logs, analyses, workload logs; no recordings).
# Usage (2-GPU device machine, repo root, stripped binaries at .carry/stackscope and .carry/netfault, as root):
#   bash eval/incidents/gpu_v2_2gpu.sh OUT SEED [run_v2.sh options, e.g. --detect]
set -uo pipefail
out=${1:?OUT}; seed=${2:-7}; shift 2 || shift $#
mkdir -p "$out"; w=/tmp/v2_2gpu; rm -rf "$w"; mkdir -p "$w"
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
nvidia-smi -L > "$w/gpu.txt" 2>&1
DETACH_GRACE=${DETACH_GRACE:-10} bash eval/incidents/run_v2.sh .carry/stackscope "$w" --gpus 2 --seeds "$seed" \
  --workloads cnn,transformer --minutes 3 --episodes 5 --budget 500 "$@" 2>&1 | tee "$out/run.log"
cp "$w/score.md" "$w/score.json" "$out/" 2>/dev/null
tar -C "$w" -czf "$out/v2_2gpu_s$seed.tgz" --exclude='*.sdb' --exclude='*.sdb-*' .
ls -la "$out"
