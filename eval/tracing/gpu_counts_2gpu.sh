#!/usr/bin/env bash
# GPU machine, two GPUs: NCCL tracing counts vs torch.profiler (torchrun, 2 ranks, DDP), then straggler runs
# over real NCCL with a randomly chosen slowed rank and fault kind.
# Usage (device machine, repo root, stripped binary at .carry/stackscope): bash eval/tracing/gpu_counts_2gpu.sh OUTDIR [RUNS]
set -uo pipefail
out=${1:?OUTDIR}; runs=${2:-6}
S=$(pwd)/.carry/stackscope
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
mkdir -p "$out" /tmp/ss
echo "== 1. counts vs torch.profiler (2 GPUs, NCCL)"
$S record -q --layers cuda,nccl,nvml,host -o /tmp/ss/val2.sdb -- \
  torchrun --nproc-per-node 2 eval/tracing/gpu_validate.py --out /tmp/ss/val2 2>&1 | grep -v Warning | tail -4
$S info /tmp/ss/val2.sdb | tee "$out/val2_info.txt"
$S export /tmp/ss/val2.sdb --format csv --what events -q -o /tmp/ss/val2.events.csv
python3 eval/tracing/compare_counts.py --validate /tmp/ss/val2 --events /tmp/ss/val2.events.csv --json "$out/val2_compare.json"
$S export /tmp/ss/val2.sdb --format perfetto -q -o "$out/val2.pftrace"
echo "== 2. stragglers on the recording itself (no fault injected)"
$S stragglers /tmp/ss/val2.sdb 2>&1 | head -20
echo "== 3. straggler runs over NCCL"
for i in $(seq 1 "$runs"); do
  r=$((RANDOM % 2)); k=$([ $((RANDOM % 2)) = 0 ] && echo compute || echo edge)
  PYTHON=python3 STACKSCOPE=$S OUT=/tmp/ss/strag$i timeout 100 bash eval/stragglers/nccl_run.sh $r $k 20 20 nccl 2>&1 | grep -E "^slowed|^RESULT"
done | tee "$out/stragglers.txt"
cp /tmp/ss/strag1/report.html "$out/straggler_report.html" 2>/dev/null || true
grep -c "RESULT OK" "$out/stragglers.txt"
