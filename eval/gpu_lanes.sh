#!/usr/bin/env bash
# One device command on a 4-GPU host, one lane a GPU (device time is 30 min a session; the lanes share no process,
# each `record` attaches its uprobes to its own job's pids only). Each lane gets its GPU (CUDA_VISIBLE_DEVICES) and
# 16 CPUs of its own (taskset); they share the host's memory bandwidth and PCIe, as jobs on one node do.
#   LANES="0:cost 1:ops 2:clean:transformer 3:clean:infer" OUT=$OUT SEED=151 bash eval/gpu_lanes.sh
# Lane kinds:
#   cost            issue 14's cost pairs with the in-run split (eval/tracing/gpu_cost_pairs.sh, KEEP=1: the last
#                   launch-bound default recording and its step times come back in cost_keep.tar.xz)
#   attach          issue 14's whole-recording cost inside one job process (eval/tracing/gpu_attach_pairs.sh: record --pid
#                   in and out of a long-running job; DUR 14 s, GAP 4 s, caps 300 / 220 s here, so each recording
#                   gets past the budget's start-up full attachment and both workloads fit the lanes' 9 minutes)
#   attach:lb       issue 14's precise mode (eval/tracing/gpu_attach_launch_bound.sh): launch-bound only, default against no
#                   recorder, ~40 alternations of DUR 8 s / GAP 3 s in LB_CAP (default 520) s, the verdict on 2 % from
#                   a 95 % interval with the gaps' null beside it; two such lanes pool with
#                   `attach_pairs.py --combine laneA/attach/launch_bound.attach.json laneB/... --out DIR`
#   ops             issue 14's operator counts against torch.profiler (eval/tracing/gpu_op_counts.sh)
#   clean:WORKLOAD  issue 13's clean time: eval/incidents/run_v2.sh --clean-only, two runs of CLEAN_MINUTES (default
#                   4) under `record --detect`, seeds SEED+2g and SEED+2g+1; any incident is a false one
#   faults:WORKLOAD issue 13's episodes: eval/incidents/run_v2.sh, two fault runs of FAULT_MINUTES (default 2.5, 4
#                   episodes each) under `record --detect`, seeds SEED+2g and SEED+2g+1; scored with the clean lanes,
#                   and their recordings come back as fault.*.sdb.xz (as many as the 8 files allow) to re-score
#                   here. Never beside clean lanes: the faults (storage, network, memory) are the whole host's
# Results: $OUT/lanes.tar.xz (every lane's logs and results, no recordings), $OUT/clean_score.md (the clean lanes
# scored together), $OUT/cost_keep.tar.xz, $OUT/false_N.*.sdb.xz (up to 4 recordings of clean runs with an incident). Carry [".carry"] (.carry/stackscope, .carry/netfault).
set -u
OUT=${OUT:?set OUT}; seed=${SEED:-151}
lanes=${LANES:?set LANES, e.g. "0:cost 1:ops 2:clean:transformer 3:clean:infer"}
w=/tmp/lanes; rm -rf "$w"; mkdir -p "$w"
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$w/gpus.txt" 2>&1
for lane in $lanes; do
  IFS=: read -r g kind arg <<< "$lane"
  cpus=$((16 * g))-$((16 * g + 15)); d=$w/lane$g; mkdir -p "$d"
  case $kind in
    cost) (CUDA_VISIBLE_DEVICES=$g OUT=$d KEEP=1 taskset -c "$cpus" bash eval/tracing/gpu_cost_pairs.sh > "$d/run.txt" 2>&1) & ;;
    attach) if [[ $arg == lb ]]; then (LB_CAP=${LB_CAP:-520} CUDA_VISIBLE_DEVICES=$g OUT=$d/attach taskset -c "$cpus" bash eval/tracing/gpu_attach_launch_bound.sh > "$d/run.txt" 2>&1) &
      else (DUR=${DUR:-14} GAP=${GAP:-4} LB_CAP=${LB_CAP:-300} SB_CAP=${SB_CAP:-220} CUDA_VISIBLE_DEVICES=$g OUT=$d/attach taskset -c "$cpus" bash eval/tracing/gpu_attach_pairs.sh > "$d/run.txt" 2>&1) & fi ;;
    ops) (CUDA_VISIBLE_DEVICES=$g OUT=$d taskset -c "$cpus" bash eval/tracing/gpu_op_counts.sh > "$d/run.txt" 2>&1) & ;;
    clean) (KEEP_SDB=1 CUDA_VISIBLE_DEVICES=$g DATA_DIR=/var/tmp/stackscope-v2-$g taskset -c "$cpus" \
      bash eval/incidents/run_v2.sh .carry/stackscope "$d/v2" --gpus 1 --seeds "$((seed + 2 * g)),$((seed + 2 * g + 1))" \
      --workloads "$arg" --clean-only --clean-minutes "${CLEAN_MINUTES:-4}" --detect --budget "${BUDGET:-540}" \
      > "$d/run.txt" 2>&1) & ;;
    faults) (KEEP_SDB=1 CUDA_VISIBLE_DEVICES=$g DATA_DIR=/var/tmp/stackscope-v2-$g taskset -c "$cpus" \
      bash eval/incidents/run_v2.sh .carry/stackscope "$d/v2" --gpus 1 --seeds "$((seed + 2 * g)),$((seed + 2 * g + 1))" \
      --workloads "$arg" --minutes "${FAULT_MINUTES:-2.5}" --episodes 4 --detect --budget "${BUDGET:-540}" \
      > "$d/run.txt" 2>&1) & ;;
    *) echo "gpu_lanes.sh: unknown lane kind $kind" >&2 ;;
  esac
done
wait
for lane in $lanes; do IFS=: read -r g kind arg <<< "$lane"; echo "=== lane $g: $kind $arg"; tail -n 60 "$w/lane$g/run.txt"; done
mkdir -p "$w/clean_all"
for f in "$w"/lane*/v2/*.{faults.jsonl,analysis.json,online.jsonl}; do
  [[ -e $f ]] && cp "$f" "$w/clean_all/$(basename "$(dirname "$(dirname "$f")")")_$(basename "$f")"; done
if compgen -G "$w/clean_all/*" > /dev/null; then
  python3 eval/incidents/score.py "$w/clean_all" --md "$OUT/clean_score.md" --json "$w/clean_all/score.json" > /dev/null
  cat "$OUT/clean_score.md"
fi
keep=$(find "$w" -path '*/ovh/*' \( -name '*.sdb' -o -name '*steps*' \) 2>/dev/null)
[[ -n $keep ]] && tar -cf - $keep 2>/dev/null | xz -T8 -6 > "$OUT/cost_keep.tar.xz"
# The recordings of clean runs that had a false incident (KEEP_SDB=1 in the clean lanes), to re-analyse here.
python3 - "$w" > "$w/false_runs.txt" <<'PY'
import json, sys, glob
for f in glob.glob(sys.argv[1] + "/lane*/v2/*.analysis.json"):
    rec = json.load(open(f))["recordings"][0]
    if rec.get("incidents") and f.endswith("_clean.analysis.json"): print(rec["path"])
PY
n=0; for r in $(cat "$w/false_runs.txt"); do
  [[ -e $r ]] || continue; n=$((n + 1)); ((n > 4)) && break  # at most 4 files of about 3 MiB compressed
  xz -T8 -6 -c "$r" > "$OUT/false_$n.$(basename "$(dirname "$(dirname "$r")")")_$(basename "$r").xz"; done
# The fault runs' recordings, one file each (a run is 5-8 MiB compressed; the device tool brings back 8 files of at
# most 16 MiB): as many as the files left allow, lanes.tar.xz still to come.
for r in $(find "$w" -path '*/v2/*.sdb' ! -name '*_clean.sdb' 2>/dev/null | sort); do
  (( $(find "$OUT" -maxdepth 1 -type f | wc -l) >= 7 )) && break
  f="$OUT/fault.$(basename "$(dirname "$(dirname "$r")")")_$(basename "$r").xz"
  xz -T8 -6 -c "$r" > "$f"
  (( $(stat -c %s "$f") < 16 * 1024 * 1024 )) || rm -f "$f"
done
tar -C "$w" --exclude='*.sdb' --exclude='*.sdb-*' -cf - . | xz -T8 -6 > "$OUT/lanes.tar.xz"
ls -la "$OUT"
