#!/usr/bin/env bash
# eACGM Table I data on the GPU machine: a fault-injected GPT-2 run recorded by stackscope, then the per-layer window
# features (`stackscope features`) and the injection log written to OUTDIR. The table itself is computed anywhere
# afterwards with eval/faults/table1.py (scikit-learn and xgboost from Debian).
# Usage (device machine, repo root; stripped binaries at .carry/stackscope and .carry/netfault):
#   bash eval/faults/gpu_table1.sh OUTDIR gpu  [SEED] [CLEAN_S] [TEST_S]   one GPU: python, torch, cuda, nvml faults
#   bash eval/faults/gpu_table1.sh OUTDIR nccl [SEED] [CLEAN_S] [TEST_S]   two GPUs: NCCL over sockets on lo
# PYMODE (default stack) and PYARGS choose how the gpu run's python layer is recorded (`record --python-mode`):
# stack samples Python stacks from eBPF (on-CPU samples and blocked time per function, events named after the
# function), continuously; capi's duty cycle attached probes one second in ten, and those seconds slowed the job
# enough to show in every layer (most of the Torch false alarms of the first table fell at the attach times).
# The table: eval/faults/run_table1.sh STACKSCOPE RESULTS OUTDIR SEED (departures from the job's own baseline are
# computed there from the raw features written here).
set -uo pipefail
out=${1:?OUTDIR}; group=${2:-gpu}; seed=${3:-7}; clean=${4:-100}; test=${5:-380}; window=${WINDOW:-0.5}
S=$(pwd)/.carry/stackscope
# Detaching hundreds of uprobes can take minutes on this kernel (it serialises unregistration), and the recording
# is durable as it goes (WAL, flushed every 250 ms): so once the workload is done, stop the recorder with SIGKILL
# rather than wait, which also exercises the crash-safety path.
limit=$(( ${clean%.*} + ${test%.*} + 90 ))
stop_when_done() {  # $1: the recorder's pid, $2: the workload's log, $3: ranks; SIGKILL 3 s after all finished
  local t=0
  while kill -0 "$1" 2>/dev/null; do
    if [[ $(grep -c " episodes$" "$2" 2>/dev/null) -ge $3 || $t -ge $limit ]]; then
      sleep 3; kill -KILL "$1"; break
    fi
    sleep 1; t=$((t + 1))
  done
  wait "$1" 2>/dev/null
}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
mkdir -p "$out" /tmp/ft
rm -f /tmp/ft/rec.sdb /tmp/ft/faults.jsonl*
if [[ $group == gpu ]]; then
  layers=cuda,torch,python,nvml
  # A short operator list: the default one (with every *_backward) is hundreds of uprobes, slow to attach and detach.
  ops=mm,addmm,bmm,matmul,linear,gelu,layer_norm,native_layer_norm,add_Tensor,embedding,_scaled_dot_product_*attention,nll_loss_forward,gelu_backward,native_layer_norm_backward,_fused_adamw_
  $S record --layers $layers,host --python-mode "${PYMODE:-stack}" ${PYARGS:-} --torch-ops "$ops" -o /tmp/ft/rec.sdb -- \
    python3 eval/faults/fault_train.py --faults gpu --seed "$seed" --clean "$clean" --test "$test" \
    --fault-log /tmp/ft/faults.jsonl > "$out/run_${group}_${seed}.log" 2>&1 &
  stop_when_done $! "$out/run_${group}_${seed}.log" 1
  tail -3 "$out/run_${group}_${seed}.log"
else
  layers=nccl,cuda,nvml
  # NCCL over TCP sockets on loopback, so that netfault's dropped packets are real loss for it.
  export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo
  $S record --layers $layers,host -o /tmp/ft/rec.sdb -- \
    torchrun --nproc-per-node 2 eval/faults/fault_train.py --faults nccl --small --seed "$seed" \
    --clean "$clean" --test "$test" --netfault "$(pwd)/.carry/netfault" --fault-log /tmp/ft/faults.jsonl \
    > "$out/run_${group}_${seed}.log" 2>&1 &
  stop_when_done $! "$out/run_${group}_${seed}.log" 2
  .carry/netfault --cleanup >/dev/null 2>&1 || true
  tail -3 "$out/run_${group}_${seed}.log"
fi
$S info /tmp/ft/rec.sdb > "$out/info_${group}_${seed}.txt"
cat /tmp/ft/faults.jsonl* > "$out/faults_${group}_${seed}.jsonl"
for l in ${layers//,/ }; do
  $S features /tmp/ft/rec.sdb --layer "$l" --window "$window" -o "$out/${group}_${seed}_$l.csv" || echo "features $l failed"
done
head -30 "$out/info_${group}_${seed}.txt"
ls -la "$out"
