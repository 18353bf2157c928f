#!/usr/bin/env bash
# Incident benchmark v2 on fresh held-out seeds with the engine frozen at this
# commit (record --detect, defaults otherwise), the recordings kept and brought back (xz, split in 15 MiB parts) so
# that every later engine can be re-scored on them on the CPU VM (eval/incidents/rescore_local.sh).
#   one GPU  (nvidia-h100-x1, ~10 min): SEED=31 bash eval/incidents/gpu_heldout.sh 1
#   two GPUs (nvidia-h100-x2, ~10 min): SEED=32 bash eval/incidents/gpu_heldout.sh 2
# after, on the CPU VM: mkdir -p .carry && strip -o .carry/stackscope build/src/cli/stackscope &&
#   strip -o .carry/netfault build/eval/netfault/netfault   (carry: [".carry"]); OUT is set by the device tool.
# Seeds already used (tuning and held out) are listed in docs/benchmarks/incidents.md: take new ones.
set -u
gpus=${1:-1}; seed=${SEED:?SEED: a seed not used before}
if [[ $gpus == 2 ]]; then
  KEEP_SDB=1 bash eval/incidents/gpu_v2_2gpu.sh $OUT/v2 "$seed" --detect --budget ${BUDGET:-500} > $OUT/v2.log 2>&1
  w=/tmp/v2_2gpu
else
  KEEP_SDB=1 bash eval/incidents/gpu_v2_1gpu.sh $OUT/v2 "$seed" --detect --budget ${BUDGET:-470} > $OUT/v2.log 2>&1
  w=/tmp/v2_1gpu
fi
(cd $w && tar -cf - $(find . -name '*.sdb') | xz -T8 -3 | split -b 15M - $OUT/sdb.tar.xz.)
tail -40 $OUT/v2.log
ls -la $OUT $OUT/v2
