#!/usr/bin/env bash
# Table I from the kept dataset (eval/faults/data: window features and injection logs of the H200 runs made with
# eval/faults/gpu_table1.sh). Usage: eval/faults/run_table1.sh [STACKSCOPE] [OUTDIR]   (needs python3-sklearn,
# python3-xgboost, python3-matplotlib from Debian; about 30 s)
set -euo pipefail
cd "$(dirname "$0")/../.."
S=${1:-build/src/cli/stackscope}; out=${2:-eval/faults/results}; D=eval/faults/data
# Diagonal covariance: a full 47 x 47 covariance per component from ~125 clean windows overfits (results with
# full covariance are in docs/BENCHMARKS.md too); thresholds from held-out clean windows (--calibrate 0.3).
/usr/bin/python3 eval/faults/table1.py --stackscope "$S" --log $D/faults_gpu_7.jsonl \
  --features cuda=$D/gpu_7_cuda.csv --features python=$D/gpu_7_python.csv --features torch=$D/gpu_7_torch.csv \
  --features nvml=$D/gpu_7_nvml.csv --detect-arg=--covariance --detect-arg=diag --out "$out/gpu"
/usr/bin/python3 eval/faults/table1.py --stackscope "$S" --log $D/faults_nccl_7.jsonl \
  --features nccl=$D/nccl_7_nccl.csv --detect-arg=--covariance --detect-arg=diag --out "$out/nccl"
