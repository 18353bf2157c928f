#!/usr/bin/env bash
# The agent's figures on a GPU machine (the device tool, 2 GPUs for NCCL), in one command of about 4 minutes:
# the in-process exposition of 8 GPUs x 700 series, then agent_bench.sh beside a real 2-rank DDP job over NCCL
# (torchrun: a launcher and two ranks, one job): the agent idle, the agent beside the job (CPU by thread, RSS and
# where it is: $OUT/agent_smaps.txt), an incident's delay in /metrics, and the baseline: `stackscope record` of the
# same job, its recorder's CPU measured the same way (the agent's own share is the difference).
# One NVML sampler a node, an XID thread that cannot spin, slow NVML queries every 1 s: to check them, the output
# also says how many ss-nvml / ss-nvml-xid threads the agent had during the job (1 and 1 expected; JSON
# nvml_threads_during_job) and $OUT/nvml_notes.txt holds every NVML note of the node's, the job's and the baseline's
# recordings: the per-query-group cost of a round ("sampling round of N GPU(s): ..."), whether an XID wait came back
# early ("XID events: ..."), and why the PCIe byte counters are not used ("PCIe byte counters (fields 197/198): ...");
# $OUT/pcie_fields.txt: each field's return code, value type and growth, and one call's time, per GPU.
# Prepare on the build machine (the agent links Debian's prometheus-cpp and civetweb, shared libraries only):
#   mkdir -p .carry/lib && strip -o .carry/stackscope-agent build/src/cli/stackscope-agent &&
#   strip -o .carry/stackscope build/src/cli/stackscope &&
#   strip -o .carry/agent_scrape_bench build/bench/agent/agent_scrape_bench &&
#   cp -L /usr/lib/x86_64-linux-gnu/libprometheus-cpp-core.so.1.0 /usr/lib/x86_64-linux-gnu/libcivetweb.so.1 \
#     /usr/lib/x86_64-linux-gnu/libbenchmark.so.1debian .carry/lib/
# Run (device machine, repo root): OUT=$OUT bash bench/agent/gpu_agent.sh
#   (IDLE_S, JOB_S: seconds of the idle and one-job measurements, default 60 and 60: the idle node reads its costlier
#   series every 30 s, so the idle window holds two of those reads, not zero or one)
# The node's cost notes are per schedule ("sampling round ..., idle schedule (no job traced)" and
# "..., job schedule (a job traced)", each with "process utilization on X of Y GPU reads"); $OUT/host_notes.txt has
# the node host sampler's CPU a read by family ("host families' CPU a read ...").
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:?set OUT}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$(pwd)/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
PY=${PY:-/opt/torch/.venv/bin/python3}
TR=$(dirname "$PY")/torchrun
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$OUT/gpus.txt" || true
# What the driver answers for the PCIe byte counters and the other fields (why the 20 ms query was used on H200).
"$PY" eval/nvml/pcie_fields.py >"$OUT/pcie_fields.txt" 2>&1 || true
# The NVML sampler alone on the idle GPUs at the agent's idle period (1 s): its cost by query group (the idle agent's
# ss-nvml can take 3.8 % of a core; the target for the whole agent is 1 %).
.carry/stackscope nvml --duration 15 --interval-ms 1000 -o "$OUT/nvml_idle.sdb" >"$OUT/nvml_idle.txt" 2>&1 || true
.carry/stackscope info "$OUT/nvml_idle.sdb" 2>&1 | grep -E 'note +nvml' | tee -a "$OUT/nvml_idle.txt" || true
.carry/agent_scrape_bench --benchmark_min_time=1 2>&1 | tee "$OUT/scrape_bench.txt"
# Only the bench's job is traced (command_filter): the figures are of one job.
AGENT=.carry/stackscope-agent RECORD=.carry/stackscope IDLE_S=${IDLE_S:-60} JOB_S=${JOB_S:-60} OUT="$OUT" \
  AGENT_ARGS="--set discovery.command_filter=ddp_job" \
  bash bench/agent/agent_bench.sh "$TR" --nproc-per-node 2 eval/stragglers/ddp_job.py --backend nccl --steps 1000000
