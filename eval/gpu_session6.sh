#!/usr/bin/env bash
# GPU machine, one GPU, one device-tool call (< 10 min): the incident engine on real GPU jobs before its settings
# are frozen (tuning data, seed 7 of benchmark v2; held-out seeds are 13 and later):
#   1. bench/culprit_series_gpu.sh: the culprit series name a CPU hog and a second GPU process (40 s)
#   2. scripts/gpu_incidents_check.sh: a 100 s CNN with CPU hogs at 30-45 s and a GPU hog at 60-75 s
#   3. eval/incidents/run_v2.sh --gpus 1 --seeds 7: the three workloads, short runs, recordings kept
# Results under OUT (at most 8 files): session6.tgz (texts and JSON), rec.tgz.part-* (the recordings, split).
# Usage (device machine, repo root, stripped binaries in .carry/): bash eval/gpu_session6.sh OUT [V2_BUDGET_S]
set -uo pipefail
out=${1:?OUT}; budget=${2:-330}
w=/tmp/s6; rm -rf "$w"; mkdir -p "$w" "$out"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
ulimit -l unlimited 2>/dev/null || true
export PYTHONUNBUFFERED=1
t0=$SECONDS
nvidia-smi -L; nproc
echo "== culprit series"
STACKSCOPE=.carry/stackscope timeout 90 bash bench/culprit_series_gpu.sh "$w/culprits" > "$w/culprits.log" 2>&1
tail -15 "$w/culprits/culprits.txt" 2>/dev/null || tail -5 "$w/culprits.log"; echo "  ($((SECONDS - t0)) s)"
mkdir -p "$w/rec"; mv "$w"/culprits/*.sdb "$w/rec/" 2>/dev/null
echo "== incidents check (CNN, cpu hog 30-45 s, gpu hog 60-75 s)"
OUT=$w/check timeout 200 bash scripts/gpu_incidents_check.sh .carry/stackscope > "$w/check.log" 2>&1
cat "$w/check/episodes.txt" "$w/check/analyze.txt" 2>/dev/null | head -60
grep -E "Elapsed|Maximum resident" "$w/check/analyze_time.txt" 2>/dev/null; echo "  ($((SECONDS - t0)) s)"
echo "== benchmark v2, seed 7 (tuning)"
left=$(( 560 - (SECONDS - t0) )); (( left > budget )) || budget=$left
KEEP_SDB=1 DETACH_GRACE=10 timeout $((budget + 40)) bash eval/incidents/run_v2.sh .carry/stackscope "$w/v2" --gpus 1 \
  --seeds 7 --workloads cnn,transformer,infer --minutes 1.5 --episodes 3 --budget "$budget" > "$w/v2.log" 2>&1
tail -40 "$w/v2/score.md" 2>/dev/null || tail -20 "$w/v2.log"; echo "  ($((SECONDS - t0)) s)"
find "$w" -name '*.sdb' -exec mv {} "$w/rec/" \; 2>/dev/null
find "$w" -name '*.sdb-*' -delete 2>/dev/null
ls -la "$w/rec"
tar -C "$w" -czf "$out/session6.tgz" --exclude=rec . 
tar -C "$w" -cf - rec | split -b 15M -a 1 - "$out/rec.tar.part-"
ls -la "$out"
