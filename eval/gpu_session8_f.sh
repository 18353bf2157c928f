#!/usr/bin/env bash
# Session 8, GPU step F (H100 x2): does `record` (and `record --detect`) of a 2-rank NCCL job crash? (seed 22 did)
set -u
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
PY=/opt/torch/.venv/bin/python3; TR=$(dirname $PY)/torchrun
which gdb > $OUT/gdb.txt 2>&1
for mode in plain detect; do
  extra=(); [[ $mode == detect ]] && extra=(--detect --detect-log $OUT/$mode.online.jsonl)
  if command -v gdb >/dev/null; then
    timeout 120 gdb -batch -ex run -ex "thread apply all bt 8" --args .carry/stackscope_sym record "${extra[@]}" -o /tmp/$mode.sdb -- $TR --nproc-per-node 2 eval/stragglers/ddp_job.py --backend nccl --steps 3000 > $OUT/$mode.log 2>&1
  else
    timeout 120 .carry/stackscope_sym record "${extra[@]}" -o /tmp/$mode.sdb -- $TR --nproc-per-node 2 eval/stragglers/ddp_job.py --backend nccl --steps 3000 > $OUT/$mode.log 2>&1
  fi
  echo "$mode rc=$?" >> $OUT/rc.txt
  tail -5 $OUT/$mode.log
done
cat $OUT/rc.txt
