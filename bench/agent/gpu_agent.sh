#!/usr/bin/env bash
# Issue 16's agent figures on a GPU machine (the device tool, 2 GPUs for NCCL): agent_bench.sh beside a real
# 2-rank DDP job over NCCL (torchrun), then the in-process exposition of 8 GPUs x 700 series.
# Prepare on the build machine (the agent links Debian's prometheus-cpp and civetweb, shared libraries only):
#   mkdir -p .carry/lib && strip -o .carry/stackscope-agent build/src/cli/stackscope-agent &&
#   strip -o .carry/agent_scrape_bench build/bench/agent/agent_scrape_bench &&
#   cp -L /usr/lib/x86_64-linux-gnu/libprometheus-cpp-core.so.1.0 /usr/lib/x86_64-linux-gnu/libcivetweb.so.1 .carry/lib/
# Run (device machine, repo root): OUT=$OUT bash bench/agent/gpu_agent.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:?set OUT}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$(pwd)/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
PY=${PY:-/opt/torch/.venv/bin/python3}
TR=$(dirname "$PY")/torchrun
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$OUT/gpus.txt" || true
.carry/agent_scrape_bench --benchmark_min_time=1 2>&1 | tee "$OUT/scrape_bench.txt"
AGENT=.carry/stackscope-agent IDLE_S=${IDLE_S:-60} JOB_S=${JOB_S:-120} OUT="$OUT" \
  bash bench/agent/agent_bench.sh "$TR" --nproc-per-node 2 eval/stragglers/ddp_job.py --backend nccl --steps 1000000
