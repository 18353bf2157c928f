#!/usr/bin/env bash
# GPU machine, one GPU, about 8 minutes: python C-API duty-cycle overhead (with torch), NVML memory.used against
# nvidia-smi, the kernel layer on a GPT-2 run and its overhead, and how long `record` takes to end with the torch
# layer. Usage (device machine, repo root, stripped binary at .carry/stackscope): bash eval/tracing/gpu_capi_kernel_nvml.sh OUTDIR
set -uo pipefail
out=${1:?OUTDIR}
S=$(pwd)/.carry/stackscope
export PYTHONUNBUFFERED=1
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
mkdir -p "$out" /tmp/ss
echo "== python C-API duty cycle 1s/10s, with torch (3 pairs)"
timeout 240 python3 bench/overhead/gpt2_overhead.py --stackscope "$S" --pairs 3 \
  --trace-layers cuda,nccl,torch,python,nvml,host --record-args "--python-mode capi --python-duty 1s/10s" \
  --out "$out/overhead_python_duty.json" > "$out/duty.log" 2>&1
tail -5 "$out/duty.log"
echo "== NVML vs nvidia-smi"
OUT=/tmp/nvml-check timeout 70 bash eval/nvml/check_nvml.sh "$S" > "$out/nvml.log" 2>&1
grep -E "memory|verdict|ok|differ" "$out/nvml.log" | tail -14
echo "== kernel layer at 100 Hz on a GPT-2 run"
$S record -q --layers kernel,nvml,host -i 10 -o /tmp/ss/kernel.sdb -- \
  python3 bench/overhead/gpt2_overhead.py --worker --steps 50 > /dev/null 2>&1
$S info /tmp/ss/kernel.sdb > "$out/kernel_info.txt" 2>&1; head -20 "$out/kernel_info.txt"
echo "== kernel layer overhead (2 pairs)"
timeout 150 python3 bench/overhead/gpt2_overhead.py --stackscope "$S" --pairs 2 \
  --trace-layers cuda,nccl,kernel,nvml,host --record-args "-i 10" --out "$out/overhead_kernel.json" > "$out/kernel_overhead.log" 2>&1
tail -4 "$out/kernel_overhead.log"
echo "== ending a recording with the torch layer"
start=$(date +%s.%N)
$S record --layers cuda,torch -o /tmp/ss/stop.sdb -- python3 bench/overhead/gpt2_overhead.py --worker --steps 20 \
  > "$out/stop.log" 2>&1
end=$(date +%s.%N)
echo "record ran $(python3 -c "print(round($end - $start, 1))") s in all" | tee -a "$out/stop.log"
grep -E "stackscope" "$out/stop.log" | tail -4
