#!/usr/bin/env bash
# Session 9, GPU step A (H100 x2): the 2-rank harness run that aborted the recorder in session 8, now with the crash
# report (thread + backtrace, symbolised on the CPU VM against the unstripped build), once as is and once under
# glibc's malloc checker; plus two plain 2-rank NCCL recordings (clean, and rank 1 slowed) kept for issue 15.
set -u
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
{ ldd --version | head -1; nproc; cat /sys/devices/system/cpu/possible; ls /usr/lib/x86_64-linux-gnu/libc_malloc_debug.so.0 /lib64/libc_malloc_debug.so.0 2>&1; nvidia-smi -L; } > $OUT/env.txt 2>&1
run_harness() {  # $1 name, then env for the recorder
  local name=$1; shift
  env "$@" bash eval/incidents/gpu_v2_2gpu.sh /tmp/$name 24 --detect --minutes 1 --episodes 2 --budget 140 --workloads cnn \
    > $OUT/$name.log 2>&1
  cp /tmp/v2_2gpu/cnn_s24.log $OUT/$name.cnn.log 2>/dev/null
  cp /tmp/$name/score.md $OUT/$name.score.md 2>/dev/null
  grep -B2 -A40 "fatal signal\|tcache\|malloc" $OUT/$name.cnn.log | head -80
}
timeout 200 bash -c "$(declare -f run_harness); OUT=$OUT; run_harness plain"
md=$(ls /usr/lib/x86_64-linux-gnu/libc_malloc_debug.so.0 /lib64/libc_malloc_debug.so.0 2>/dev/null | head -1)
if [[ -n $md ]]; then
  timeout 200 bash -c "$(declare -f run_harness); OUT=$OUT; run_harness mcheck LD_PRELOAD=$md GLIBC_TUNABLES=glibc.malloc.check=3"
fi
PY=/opt/torch/.venv/bin/python3; TR=$(dirname $PY)/torchrun
mkdir -p /tmp/ddp
for spec in "clean -1 none" "slow1 1 compute"; do
  read -r n slow fault <<< "$spec"
  timeout 120 .carry/stackscope record -q -o /tmp/ddp/$n.sdb -- $TR --nproc-per-node 2 --master-port 29733 \
    eval/stragglers/ddp_job.py --backend nccl --width 2048 --batch 512 --steps 600 --slow-rank $slow --fault $fault \
    --delay-ms 4 > /tmp/ddp/$n.log 2>&1
  echo "$n rc=$?" >> $OUT/ddp.txt
  .carry/stackscope stragglers /tmp/ddp/$n.sdb >> $OUT/ddp.txt 2>&1
done
tar -C /tmp/ddp -cJf $OUT/ddp.tar.xz . 2>/dev/null
ls -la $OUT
