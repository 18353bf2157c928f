#!/bin/sh
# Cost of the python stack sampler (--python-mode stack) from the BPF programs' own run time
# (kernel.bpf_stats_enabled; stackscope notes it at the end of the recording). Root. Three 3-s workloads:
#   idle   python sleeps: every CPU-clock sample misses (cost of a miss, and of sched_switch for other tasks)
#   spin   one Python function spins: ~HZ samples/s hit (per-sample cost = (total - misses x miss cost) / hits)
#   sleep  2000 x time.sleep(1 ms) reported with --python-offcpu-min 1ns: one stack walk per block
# Usage: eval/tracing/pystack_cost.sh STACKSCOPE [PYTHON] [HZ]   (PYTHON default /usr/bin/python3.11, HZ 99)
set -eu
SS=$1
PY=${2:-/usr/bin/python3.11}
HZ=${3:-99}
OUT=${OUT:-/tmp/pystack-cost}
mkdir -p "$OUT"
stats=/proc/sys/kernel/bpf_stats_enabled
old=$(cat $stats)
trap 'echo "$old" > $stats' EXIT  # restored on any exit, failures included
echo 1 > $stats
for i in 1 2; do
  for w in idle spin sleep; do
    case $w in
      idle) code='import time; time.sleep(3)' ;;
      spin) code='import time
def spin():
    end = time.perf_counter() + 3
    while time.perf_counter() < end: pass
spin()' ;;
      sleep) code='import time
def sleepy(): time.sleep(0.001)
for _ in range(2000): sleepy()' ;;
    esac
    "$SS" record -q --layers python --python-mode stack --python-sample-hz "$HZ" --python-offcpu-min 1ns \
        -o "$OUT/$w$i.sdb" -- "$PY" -c "$code" > /dev/null 2>&1
    echo "$w$i: $("$SS" info "$OUT/$w$i.sdb" | grep -E '^  events' | tr -s ' ')"
    "$SS" info "$OUT/$w$i.sdb" | grep -o 'on_cpu_sample:.*' || echo "  (no BPF cost note)"
  done
done
echo "$old" > $stats
