#!/usr/bin/env bash
# GPU machine, one GPU: tracer counts vs torch.profiler, NVML against nvidia-smi, tracing overhead.
# Usage (on the device machine, from the repo root, with the stripped binary at .carry/stackscope):
#   bash eval/tracing/gpu_counts_1gpu.sh OUTDIR
set -uo pipefail
out=${1:?OUTDIR}
S=$(pwd)/.carry/stackscope
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
mkdir -p "$out" /tmp/ss
echo "== 1. counts vs torch.profiler (1 GPU)"
$S record -q --layers cuda,nccl,torch,python,nvml,host -o /tmp/ss/val1.sdb -- \
  python3 eval/tracing/gpu_validate.py --out /tmp/ss/val1 --empty-cache 2>&1 | tail -5
$S info /tmp/ss/val1.sdb | tee "$out/val1_info.txt"
$S export /tmp/ss/val1.sdb --format csv --what events -q -o /tmp/ss/val1.events.csv
python3 eval/tracing/compare_counts.py --validate /tmp/ss/val1 --events /tmp/ss/val1.events.csv --json "$out/val1_compare.json"
cp /tmp/ss/val1/validate_rank0.json "$out/" 2>/dev/null
$S export /tmp/ss/val1.sdb --format perfetto -q -o "$out/val1.pftrace" 2>&1 | tail -2
echo "== 2. NVML"
OUT=/tmp/nvml-check timeout 60 bash eval/nvml/check_nvml.sh "$S" 2>&1 | tail -25
echo "== 3. overhead: cuda,nccl,nvml,host"
timeout 200 python3 bench/overhead/gpt2_overhead.py --stackscope "$S" --pairs 4 --trace-layers cuda,nccl,nvml,host --out "$out/overhead_base.json" 2>&1 | tail -8
echo "== 4. overhead: + torch,python"
timeout 220 python3 bench/overhead/gpt2_overhead.py --stackscope "$S" --pairs 4 --trace-layers cuda,nccl,torch,python,nvml,host --out "$out/overhead_all.json" 2>&1 | tail -8
