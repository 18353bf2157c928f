#!/usr/bin/env bash
# Incident benchmark v2: for each workload x seed, the user's path and nothing more:
#   STACKSCOPE record -o X.sdb -- python3 WORKLOAD.py ... --fault-log X.faults.jsonl
#   STACKSCOPE analyze X.sdb --json > X.analysis.json
# then eval/incidents/score.py over every run (OUT/score.md, OUT/score.json). The faults are injected from outside
# the traced job by eval/incidents/injectd.py (started first, not a child of the recorder); stackscope never reads
# the fault logs.
#
# Usage: eval/incidents/run_v2.sh STACKSCOPE OUT [options]
#   --gpus 0|1|2         0: CPU; 2: torchrun, 2 ranks (DDP over NCCL forced onto loopback sockets); default: 1 when
#                        a GPU is visible to torch, else 0
#   --seeds 7,8          one schedule per seed (default 7)
#   --workloads LIST     cnn,transformer,infer (default all three; with --gpus 2: cnn,transformer)
#   --minutes M          length of each fault run's measured loop (default 2.5)
#   --episodes N         episodes per fault run (default 4)
#   --classes LIST       fault classes to deal over the runs (default: all the kind of run can take)
#   --clean-minutes M    one clean run (no faults) per seed of M minutes, workloads in turn (default 0: none)
#   --clean-only         only the clean runs (one per seed; for the false-incident rate, eval/gpu_clean_hours.sh)
#   --detect             record with `record --detect` when record --help lists it, and score detection and cause
#                        delays from its online output; without it delays are not measured
#   --budget S           start no run that would end after S seconds from now (default: no limit)
#   --netfault BIN       the packet-loss injector (default .carry/netfault, then build/eval/netfault/netfault)
#   --check              exit status 1 when a target is missed
#   --cpu-smoke          the CI smoke run: CPU, cnn, 60 s, 2 episodes (cpu_interference, host_stall)
# Environment: PYTHON (default python3 when it imports torch, else /usr/bin/python3), DATA_DIR (dataset and fsync
#   storm files; default /var/tmp/stackscope-v2, on disk), DETACH_GRACE (s to wait for the recorder after the job,
#   then SIGKILL: the recording is closed before probes detach; default 30), ANALYZE_TIMEOUT (default 300),
#   KEEP_SDB=1 keeps the recordings, RECORD_ARGS adds record options (a diagnostic, not the user's path).
# Exit status: score.py's (0 scored; 1 --check and a target missed; 2 not scorable, e.g. an analyze without the
# incident engine); 3 when a recording or an analysis failed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
S=${1:?usage: run_v2.sh STACKSCOPE OUT [options]}; out=${2:?usage: run_v2.sh STACKSCOPE OUT [options]}; shift 2
[[ -x $S ]] || { echo "run_v2.sh: $S is not an executable stackscope" >&2; exit 2; }
S=$(cd "$(dirname "$S")" && pwd)/$(basename "$S")
gpus=""; seeds=7; workloads=""; minutes=2.5; episodes=4; classes=""; clean_minutes=0; detect=0; budget=0; clean_only=0
netfault=""; check=(); smoke=0; lead=20; minlen=10; maxlen=30; mingap=8
while (($#)); do
  case $1 in
    --gpus) gpus=$2; shift ;;
    --seeds) seeds=$2; shift ;;
    --workloads) workloads=$2; shift ;;
    --minutes) minutes=$2; shift ;;
    --episodes) episodes=$2; shift ;;
    --classes) classes=$2; shift ;;
    --clean-minutes) clean_minutes=$2; shift ;;
    --clean-only) clean_only=1 ;;
    --detect) detect=1 ;;
    --budget) budget=$2; shift ;;
    --netfault) netfault=$2; shift ;;
    --check) check=(--check) ;;
    --cpu-smoke) smoke=1 ;;
    *) echo "run_v2.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
py=${PYTHON:-}
if [[ -z $py ]]; then
  if python3 -c 'import torch' 2>/dev/null; then py=$(command -v python3); else py=/usr/bin/python3; fi
fi
"$py" -c 'import torch' 2>/dev/null || { echo "run_v2.sh: $py cannot import torch" >&2; exit 2; }
if [[ -z $gpus ]]; then
  gpus=$("$py" -c 'import torch; print(min(torch.cuda.device_count(), 1))' 2>/dev/null || echo 0)
fi
if ((smoke)); then
  gpus=0; workloads=${workloads:-cnn}; minutes=1; episodes=2; classes=${classes:-cpu_interference,host_stall}
  lead=15; maxlen=15
fi
case $gpus in
  0) all=$("$py" -c "import sys; sys.path.insert(0,'$here'); import schedule; print(','.join(schedule.CPU_CLASSES))") ;;
  1) all=$("$py" -c "import sys; sys.path.insert(0,'$here'); import schedule; print(','.join(schedule.GPU_CLASSES))") ;;
  2) all=$("$py" -c "import sys; sys.path.insert(0,'$here'); import schedule; print(','.join(schedule.MULTI_GPU_CLASSES))") ;;
  *) echo "run_v2.sh: --gpus takes 0, 1 or 2" >&2; exit 2 ;;
esac
classes=${classes:-$all}
if [[ -z $workloads ]]; then
  if [[ $gpus == 2 ]]; then workloads=cnn,transformer; else workloads=cnn,transformer,infer; fi
fi
each=""
[[ $gpus == 2 && ,$classes, == *,nccl_network,* ]] && each=nccl_network
if [[ -z $netfault ]]; then
  for c in "$root/.carry/netfault" "$root/build/eval/netfault/netfault"; do [[ -x $c ]] && { netfault=$c; break; }; done
fi
if [[ ,$classes, == *,network,* || ,$classes, == *,nccl_network,* ]] && [[ -z $netfault ]]; then
  echo "run_v2.sh: the network classes need netfault (--netfault BIN, or build/eval/netfault/netfault)" >&2; exit 2
fi
data_dir=${DATA_DIR:-/var/tmp/stackscope-v2}
mkdir -p "$out" "$data_dir" || exit 2
if [[ $(stat -f -c %T "$data_dir") == tmpfs ]]; then
  echo "run_v2.sh: $data_dir is on tmpfs: storage_stall needs a disk (set DATA_DIR)" >&2; exit 2
fi
record_opts=()
if ((detect)); then
  if "$S" record --help 2>&1 | grep -q -- '--detect'; then
    record_opts=(--detect --detect-log -)
  else
    echo "run_v2.sh: this stackscope's record has no --detect: detection and cause delays are not measured" \
      | tee "$out/detect_not_measured.txt"
  fi
fi
seconds=$("$py" -c "print(round($minutes * 60))")
clean_seconds=$("$py" -c "print(round($clean_minutes * 60))")
if ((clean_only)) && [[ $clean_seconds == 0 ]]; then echo "run_v2.sh: --clean-only needs --clean-minutes M" >&2; exit 2; fi
grace=${DETACH_GRACE:-30}; analyze_timeout=${ANALYZE_TIMEOUT:-300}
export PYTHONUNBUFFERED=1
if [[ $gpus == 2 ]]; then
  # NCCL over TCP sockets on loopback (the path netfault can hurt); no NVLink multicast on the lent machines.
  export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo \
    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
fi
t_start=$SECONDS
data_port=$((10000 + ($$ % 300) * 64))  # below the ephemeral ports and 29500; two runs side by side differ
sock=/tmp/stackscope-v2-injectd.$$.sock
gpu_arg=(); ((gpus > 0)) && gpu_arg=(--gpu 0)
nf_arg=(); [[ -n $netfault ]] && nf_arg=(--netfault "$netfault")
echo "== benchmark v2: gpus=$gpus seeds=$seeds workloads=$workloads ${seconds}s x $episodes episodes; classes $classes"${RECORD_ARGS:+; record options: $RECORD_ARGS}
"$py" "$here/injectd.py" --socket "$sock" --classes "$classes" "${gpu_arg[@]}" "${nf_arg[@]}" \
  --data-dir "$data_dir" --data-port "$data_port" > "$out/injectd.log" 2>&1 &
injectd=$!
stop_injectd() {
  kill -TERM "$injectd" 2>/dev/null; wait "$injectd" 2>/dev/null
  [[ -n $netfault ]] && "$netfault" --cleanup >/dev/null 2>&1
  rm -f "$sock"
}
trap stop_injectd EXIT
for _ in $(seq 1 240); do
  grep -q '^ready' "$out/injectd.log" 2>/dev/null && break
  kill -0 "$injectd" 2>/dev/null || break
  sleep 0.5
done
grep -q '^ready' "$out/injectd.log" || { echo "run_v2.sh: the injector daemon did not start:" >&2; cat "$out/injectd.log" >&2; exit 3; }

failed=0; overhead=60
one_run() {  # $1 workload, $2 seed, $3 fault classes (or none), $4 seconds, $5 name
  local w=$1 seed=$2 faults=$3 secs=$4 name=$5 x=$out/$5
  local elapsed=$((SECONDS - t_start))
  if [[ $budget != 0 ]] && (( elapsed + secs + overhead > budget )); then
    local left=$((budget - elapsed - overhead))
    if ((left < 60)); then
      echo "   $name: not run (budget: ${elapsed}s used, needs ~$((secs + overhead))s of $budget)" | tee -a "$out/skipped.txt"
      return
    fi
    echo "   $name: shortened to ${left}s by the budget (fewer episodes)" | tee -a "$out/skipped.txt"
    secs=$left
  fi
  local launch=("$py")
  [[ $gpus == 2 ]] && launch=("$(dirname "$(command -v "$py")")/torchrun" --nproc-per-node 2)
  local t0=$SECONDS
  rm -f "$x.faults.jsonl" "$x.sdb" "$x.sdb-wal" "$x.sdb-shm"
  # RECORD_ARGS: a diagnostic departure from the user's path (e.g. "--detail full"), said in the run log.
  # shellcheck disable=SC2086
  "$S" record "${record_opts[@]}" ${RECORD_ARGS:-} -o "$x.sdb" -- "${launch[@]}" "$here/workloads/$w.py" --seconds "$secs" \
    --seed "$seed" --faults "$faults" --fault-log "$x.faults.jsonl" --injector "$sock" --data-port "$data_port" \
    --data-dir "$data_dir" --lead "$lead" --min-len "$minlen" --max-len "$maxlen" --min-gap "$mingap" \
    > "$x.log" 2>&1 < /dev/null &
  local rec=$! limit=$((secs + 240)) t=0
  # The job is done when its fault log has its end line (or it died); then the recorder gets DETACH_GRACE s.
  while kill -0 "$rec" 2>/dev/null; do
    if grep -q '"kind": "end"' "$x.faults.jsonl" 2>/dev/null || ((t >= limit)); then
      # A job that overran its time is stopped through the recorder (which passes SIGTERM on to it), so that
      # nothing of it runs on into the next run.
      ((t >= limit)) && { echo "   $name: still running after ${limit}s: SIGTERM"; kill -TERM "$rec"; }
      local g=0
      while kill -0 "$rec" 2>/dev/null && ((g < grace)); do sleep 1; g=$((g + 1)); done
      kill -0 "$rec" 2>/dev/null && { echo "   $name: recorder still detaching after ${grace}s: SIGKILL"; kill -KILL "$rec"; }
      break
    fi
    sleep 1; t=$((t + 1))
  done
  wait "$rec" 2>/dev/null
  local rec_s=$((SECONDS - t0))
  if [[ ! -s $x.sdb ]] || ! grep -q '"kind": "end"' "$x.faults.jsonl" 2>/dev/null; then
    echo "   $name: FAILED (recording or workload); last lines of $x.log:"; tail -5 "$x.log"; failed=1; return
  fi
  if ((${#record_opts[@]})); then  # online output of record --detect: its JSON lines, if it printed any
    grep -E '^\{.*"detected_at_s"' "$x.log" > "$x.online.jsonl" || rm -f "$x.online.jsonl"
  fi
  local a0=$SECONDS
  timeout "$analyze_timeout" "$S" analyze "$x.sdb" --json > "$x.analysis.json" 2> "$x.analyze.err" < /dev/null
  local rc=$? a_s=$((SECONDS - a0))
  if ! "$py" -c "import json,sys; json.load(open(sys.argv[1]))" "$x.analysis.json" 2>/dev/null; then
    ((rc == 0)) && rc=1
    mv "$x.analysis.json" "$x.analysis.failed"  # not scored: score.py reads every *.analysis.json
  fi
  local size; size=$(stat -c %s "$x.sdb")
  echo "{\"run\": \"$name\", \"record_wall_s\": $rec_s, \"analyze_s\": $a_s, \"analyze_rc\": $rc, \"sdb_bytes\": $size}" \
    > "$x.timing.json"
  echo "   $name: recorded ${rec_s}s ($((size >> 20)) MiB), analyze ${a_s}s rc=$rc; $(grep -c '"fault":' "$x.faults.jsonl") episodes"
  ((rc != 0)) && { echo "   $name: analyze failed:"; tail -3 "$x.analyze.err"; failed=1; }
  [[ ${KEEP_SDB:-0} == 1 ]] || rm -f "$x.sdb" "$x.sdb-wal" "$x.sdb-shm"
  overhead=$(( (SECONDS - t0) - secs + 10 ))
}

IFS=, read -ra seed_list <<< "${seeds// /,}"
IFS=, read -ra wl_list <<< "$workloads"
k=0
for seed in "${seed_list[@]}"; do
  mapfile -t dealt < <("$py" "$here/schedule.py" deal --seed "$seed" --workloads "$workloads" \
                         --classes "$classes" --episodes "$episodes" --each "$each")
  ((${#dealt[@]})) || { echo "run_v2.sh: no schedule for seed $seed" >&2; exit 2; }
  for line in "${dealt[@]}"; do
    ((clean_only)) && break
    read -r w cls <<< "$line"
    one_run "$w" "$seed" "$cls" "$seconds" "${w}_s${seed}"
  done
  if [[ $clean_seconds != 0 ]]; then
    w=${wl_list[$((k % ${#wl_list[@]}))]}; k=$((k + 1))
    one_run "$w" "$seed" none "$clean_seconds" "${w}_s${seed}_clean"
  fi
done
stop_injectd; trap - EXIT
echo "== scoring ($((SECONDS - t_start)) s so far)"
"$py" "$here/score.py" "$out" --md "$out/score.md" --json "$out/score.json" "${check[@]}" > /dev/null \
  2> "$out/score.err"
score_rc=$?
if [[ $score_rc == 2 ]]; then
  echo "not scored: $(cat "$out/score.err")" | tee "$out/score.md"
else
  cat "$out/score.md"
fi
echo "== done in $((SECONDS - t_start)) s"
((failed)) && exit 3
exit "$score_rc"
