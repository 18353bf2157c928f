#!/usr/bin/env bash
# Session 9, GPU step C (H100 x2): which collector corrupts the heap? One 2-rank NCCL job, watched at once by
# recorders under glibc's malloc checker, each with a different set of layers. A recorder that aborts names the
# culprit family.
set -u
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
md=/usr/lib/x86_64-linux-gnu/libc_malloc_debug.so.0
PY=/opt/torch/.venv/bin/python3; TR=$(dirname $PY)/torchrun
$TR --nproc-per-node 2 --master-port 29744 eval/stragglers/ddp_job.py --backend nccl --width 2048 --batch 512 \
  --steps 3000 > $OUT/job.log 2>&1 &
job=$!
sleep 12
rank0=$(pgrep -f "ddp_job.py" | sort -n | sed -n 2p)
echo "ranks: $(pgrep -f ddp_job.py | tr '\n' ' ') rank0=$rank0" > $OUT/pids.txt
run() {  # name, record args...
  local n=$1; shift
  env LD_PRELOAD=$md GLIBC_TUNABLES=glibc.malloc.check=3 .carry/stackscope record -q -o /tmp/c_$n.sdb "$@" \
    > $OUT/$n.log 2>&1
  echo "$n rc=$?" >> $OUT/rc.txt
}
pids=()
run nvml_a --layers nvml --duration 60 --pid $rank0 & pids+=($!)
run nvml_b --layers nvml --duration 60 --pid $rank0 & pids+=($!)
run hostkern --layers host,kernel --duration 60 --pid $rank0 & pids+=($!)
run uprobes --layers cuda,nccl,torch,python --duration 60 --pid $rank0 & pids+=($!)
run all_detect --detect --duration 60 --pid $rank0 & pids+=($!)
wait "${pids[@]}"
kill $job 2>/dev/null
sort $OUT/rc.txt
for f in $OUT/*.log; do grep -l "fatal signal" $f; done
grep -h -A22 "fatal signal" $OUT/*.log | grep -v "libc.so\|malloc_debug" | head -60
