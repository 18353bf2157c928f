#!/usr/bin/env bash
# Issue 13, "at most 1 false incident per hour of clean run": clean time on the GPU, one job a GPU. One device
# command (about 9 min) runs one lane a GPU side by side, each a GPU and its share of the host's CPUs
# (CUDA_VISIBLE_DEVICES, taskset), each `eval/incidents/run_v2.sh --clean-only`: clean runs of the benchmark's
# workloads (by default cnn, transformer, infer, cnn, one a lane) under `record --detect`, analysed with the
# defaults, no fault injected. The lanes share the host as jobs on one node do: each recorder sees the other lanes'
# processes on other GPUs and CPUs, none on its job's; any incident is a false one. Two 4-minute runs a lane: about
# 30 clean minutes a command on a 4-GPU host, 15 on a 2-GPU one (three commands on a 2-GPU host gave 0.78 h).
# Run: OUT=$OUT SEED=101 [LANES=2 WORKLOADS="infer cnn"] bash eval/gpu_clean_hours.sh
#   (carry .carry/stackscope and .carry/netfault; new seeds each command: SEED, SEED+1 per lane). Results:
#   $OUT/clean.tar.xz (fault logs, analyses, online lines, scores) and $OUT/score.md over all lanes.
set -u
OUT=${OUT:?set OUT}; seed=${SEED:?SEED}
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
w=/tmp/clean_hours; rm -rf "$w"; mkdir -p "$w"
# One lane a GPU (LANES, default every GPU the host has, at most 4), each with its share of the CPUs; WORKLOADS
# names each lane's workload in turn.
lanes=${LANES:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}; ((lanes >= 1 && lanes <= 4)) || lanes=4
read -r -a workloads <<< "${WORKLOADS:-cnn transformer infer cnn}"
per=$(($(nproc) / lanes))
for ((g = 0; g < lanes; g++)); do
  (CUDA_VISIBLE_DEVICES=$g DATA_DIR=/var/tmp/stackscope-v2-$g taskset -c $((per * g))-$((per * g + per - 1)) \
    bash eval/incidents/run_v2.sh .carry/stackscope "$w/lane$g" --gpus 1 --seeds "$((seed + 2 * g)),$((seed + 2 * g + 1))" \
    --workloads "${workloads[$g]}" --clean-only --clean-minutes "${CLEAN_MINUTES:-4}" --detect --budget "${BUDGET:-540}" \
    > "$w/lane$g.log" 2>&1) &
done
wait
mkdir -p "$w/all"
for ((g = 0; g < lanes; g++)); do for f in "$w/lane$g"/*.{faults.jsonl,analysis.json,online.jsonl}; do
  [[ -e $f ]] && cp "$f" "$w/all/lane${g}_$(basename "$f")"; done; done
python3 eval/incidents/score.py "$w/all" --md "$OUT/score.md" --json "$w/all/score.json" > /dev/null
cat "$OUT/score.md"
tar -C "$w" --exclude='*.sdb' --exclude='*.sdb-*' -cf - . | xz -T8 > "$OUT/clean.tar.xz"
