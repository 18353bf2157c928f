#!/usr/bin/env bash
# 2 GPUs (H100 x2): the 2-rank incident harness with the NVML guard build, as is and under glibc's malloc
# checker; the notes each recording holds (an NVML overrun or entry-stride note says the driver disagreed with
# the header); the report and Perfetto export of one recording with incidents (issue 17), brought back.
set -u
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
md=/usr/lib/x86_64-linux-gnu/libc_malloc_debug.so.0
mkdir -p /tmp/keep
for name in plain mcheck; do
  envs=(); [[ $name == mcheck ]] && envs=(LD_PRELOAD=$md GLIBC_TUNABLES=glibc.malloc.check=3)
  KEEP_SDB=1 timeout 220 env "${envs[@]}" bash eval/incidents/gpu_v2_2gpu.sh /tmp/$name 24 --detect --minutes 1.5 \
    --episodes 2 --budget 200 --workloads cnn > $OUT/$name.log 2>&1
  cp /tmp/v2_2gpu/cnn_s24.log $OUT/$name.cnn.log 2>/dev/null
  grep -h -A30 "fatal signal" $OUT/$name.cnn.log | head -40
  grep -E "episodes found|class right" /tmp/$name/score.md 2>/dev/null | head -2
  for f in /tmp/v2_2gpu/cnn_s24.sdb; do
    [[ -s $f ]] || continue
    .carry/stackscope info $f > $OUT/$name.info.txt 2>&1
    grep -i "nvml" $OUT/$name.info.txt | head -12
    cp $f /tmp/keep/$name.sdb; cp /tmp/v2_2gpu/cnn_s24.faults.jsonl /tmp/keep/$name.faults.jsonl 2>/dev/null
    cp /tmp/v2_2gpu/cnn_s24.analysis.json /tmp/keep/$name.analysis.json 2>/dev/null
  done
done
for name in plain mcheck; do
  [[ -s /tmp/keep/$name.sdb ]] || continue
  .carry/stackscope report /tmp/keep/$name.sdb -o /tmp/keep/$name.html > /tmp/keep/$name.report.txt 2>&1
  .carry/stackscope export /tmp/keep/$name.sdb --format perfetto -o /tmp/keep/$name.perfetto-trace > /dev/null 2>&1
  tail -12 /tmp/keep/$name.report.txt
  break
done
tar -C /tmp/keep -cJf $OUT/keep.tar.xz . 2>/dev/null
ls -la $OUT
