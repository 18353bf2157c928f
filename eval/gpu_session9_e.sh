#!/usr/bin/env bash
# Session 9, GPU step E (H100 x2): A/B of the field-values guard. Beside one 2-rank NCCL job, four NVML-only
# recorders of the build before the guard (.carry/stackscope_old) and four of the guarded build, all under glibc's
# malloc checker, 45 s each, at the same time. Counts the aborts of each.
set -u
md=/usr/lib/x86_64-linux-gnu/libc_malloc_debug.so.0
PY=/opt/torch/.venv/bin/python3; TR=$(dirname $PY)/torchrun
$TR --nproc-per-node 2 --master-port 29746 eval/stragglers/ddp_job.py --backend nccl --width 2048 --batch 512 \
  --steps 40000 > $OUT/job.log 2>&1 &
sleep 12
rank0=$(pgrep -f "ddp_job.py" | sort -n | sed -n 2p)
pids=()
for b in old new; do
  bin=.carry/stackscope; [[ $b == old ]] && bin=.carry/stackscope_old
  for n in 1 2 3 4; do
    ( env LD_PRELOAD=$md GLIBC_TUNABLES=glibc.malloc.check=3 $bin record -q -o /tmp/e_${b}$n.sdb --layers nvml \
        --duration 45 --pid $rank0 > $OUT/${b}$n.log 2>&1; echo "$b$n rc=$?" >> $OUT/rc.txt ) & pids+=($!)
  done
done
wait "${pids[@]}"
pkill -f ddp_job.py; sleep 1
sort $OUT/rc.txt
grep -c "fatal signal" $OUT/old*.log $OUT/new*.log
for f in /tmp/e_new1.sdb /tmp/e_old1.sdb; do .carry/stackscope info $f 2>&1 | grep -iE "nvml|wrote" | head -5; done
