#!/usr/bin/env bash
# Session 9, GPU step D (H100 x2): the NVML guard on the machine that corrupted the heap: three NVML-only recorders
# under glibc's malloc checker beside a 2-rank NCCL job (none may abort; their notes say how far NVML wrote), then
# the 2-rank incident harness with --detect as users run it (no checker), scored.
set -u
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
md=/usr/lib/x86_64-linux-gnu/libc_malloc_debug.so.0
PY=/opt/torch/.venv/bin/python3; TR=$(dirname $PY)/torchrun
$TR --nproc-per-node 2 --master-port 29745 eval/stragglers/ddp_job.py --backend nccl --width 2048 --batch 512 \
  --steps 40000 > $OUT/job.log 2>&1 &
job=$!
sleep 12
rank0=$(pgrep -f "ddp_job.py" | sort -n | sed -n 2p)
pids=()
for n in a b c; do
  ( env LD_PRELOAD=$md GLIBC_TUNABLES=glibc.malloc.check=3 .carry/stackscope record -q -o /tmp/d_$n.sdb --layers nvml \
      --duration 45 --pid $rank0 > $OUT/nvml_$n.log 2>&1; echo "nvml_$n rc=$?" >> $OUT/rc.txt ) & pids+=($!)
done
wait "${pids[@]}"
kill $job 2>/dev/null; pkill -f ddp_job.py; sleep 2
sort $OUT/rc.txt
for n in a b c; do .carry/stackscope info /tmp/d_$n.sdb 2>&1 | grep -i "nvml" | head -8; done
grep -h -A12 "fatal signal" $OUT/nvml_*.log | head -30
bash eval/incidents/gpu_v2_2gpu.sh /tmp/v2 24 --detect --minutes 2 --episodes 3 --budget 250 --workloads cnn \
  > $OUT/v2.log 2>&1
cp /tmp/v2/score.md $OUT/ 2>/dev/null; cp /tmp/v2/v2_2gpu_s24.tgz $OUT/ 2>/dev/null
grep -h -A12 "fatal signal" /tmp/v2_2gpu/*.log | head -20
tail -25 $OUT/v2.log
