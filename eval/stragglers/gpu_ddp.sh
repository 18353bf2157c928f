#!/usr/bin/env bash
# Stragglers on the path users take: `stackscope record -- torchrun --nproc-per-node 2 ddp_job.py` (DDP over NCCL,
# no profiler), then `stackscope stragglers run.sdb`. Runs, in a shuffled order: clean runs, runs whose slowed
# rank (random) does extra GPU work each step (torch.cuda._sleep, cause class compute), runs whose slowed rank
# starts each step late on the host (a sleep, cause class host), and runs where another process computes on the
# slowed rank's GPU (cause class gpu), and runs where a spinning process shares the slowed rank's CPU (cpu: cause
# class host). Scores the verdict (kind, rank, cause class).
# Usage (2-GPU device machine, repository root, as root; the stripped binary carried at .carry/stackscope):
#   bash eval/stragglers/gpu_ddp.sh OUT [RUNS_PER_CLASS=3] [STEPS=600] [DELAY_MS=4]      (NPROC=4: 4 GPUs)
# Writes OUT/results.jsonl (one line per run), OUT/score.txt, OUT/reports/*.txt|json (no recordings).
# SEED=N: another shuffle and other slowed ranks (default 15); MAX_S=S: start no run after S seconds; PORT_BASE=P:
# the rendezvous ports P, P+1, ... (default 29700; two batches side by side need ports apart);
# KEEP=DIR: keep the recordings there (DIR/runN.sdb) instead of deleting them.
# The same on the CPU VM (gloo, Debian's torch 1.13, ranks started by ddp_job.py as torchrun would, run niced up):
#   CPU=1 STACKSCOPE=build/src/cli/stackscope bash eval/stragglers/gpu_ddp.sh OUT 4 120 15
# (LAYERS=defaults: record's default layers under the cost budget instead of python,host)
set -uo pipefail
out=${1:?OUT}; per=${2:-3}; steps=${3:-600}; delay=${4:-4}
ranks=${NPROC:-2}  # NPROC=4 on a 4-GPU machine
JOB=eval/stragglers/ddp_job.py
if [[ -n "${CPU:-}" ]]; then
  BIN=${STACKSCOPE:-build/src/cli/stackscope}
  PY=${PYTHON:-/usr/bin/python3}
  echo -10 > /proc/self/autogroup 2>/dev/null || true  # ahead of other work on a shared VM
  job_cmd() { echo "$PY" "$JOB" --ranks "$ranks" --backend gloo --width 256 --batch 64 --port "$1"; }
  layers=(--layers python,host)
  [[ "${LAYERS:-}" == defaults ]] && layers=()  # record's defaults: every layer, the cost budget sampling them
else
  BIN=${STACKSCOPE:-.carry/stackscope}
  PY=${PYTHON:-/opt/torch/.venv/bin/python3}
  TORCHRUN=$(dirname "$PY")/torchrun
  job_cmd() { echo "$TORCHRUN" --nproc-per-node "$ranks" --master-port "$1" "$JOB" --backend nccl --width 2048 --batch 512; }
  layers=()
fi
mkdir -p "$out/reports"; w=/tmp/straggler_gpu_${PORT_BASE:-29700}; rm -rf "$w"; mkdir -p "$w"  # per batch: side by side
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
nvidia-smi -L > "$out/gpus.txt" 2>&1
"$BIN" --version > "$out/version.txt" 2>&1 || true
plan=()
# gpu: another process computes on the slowed rank's GPU (GPU machines only); cpu: each rank pinned to a CPU, a
# spinning process on the slowed rank's (expected cause class: host)
classes=(none compute host gpu cpu)
[[ -n "${CPU:-}" ]] && classes=(none compute host cpu)
for ((i = 0; i < per; i++)); do plan+=("${classes[@]:1}"); done
for ((i = 0; i < ${CLEAN_RUNS:-$per}; i++)); do plan+=(none); done  # CLEAN_RUNS=N: other than RUNS_PER_CLASS clean runs
mapfile -t plan < <(printf '%s\n' "${plan[@]}" | shuf --random-source=<(yes "${SEED:-15}"))
RANDOM=${SEED:-15}  # the slowed ranks, reproducible per SEED
# The analysis and scoring of one run. On a machine of more than 8 CPUs it runs in the background on the upper
# half of the CPUs (the job's ranks and the cpu fault's spinner use the first ones) while the next run records: a
# run records in ~20 s and its analyses took as long again. KEEP_MISSES=DIR keeps the recordings of wrong verdicts.
score_run() {
  local i=$1 fault=$2 slow=$3 rc=$4 start=$5 end=$6 rec=$7
  "$BIN" stragglers "$rec" > "$out/reports/run$i.txt" 2>&1
  "$BIN" stragglers --json "$rec" > "$out/reports/run$i.json" 2> "$out/reports/run$i.err"
  "$PY" - "$out/reports/run$i.json" "$fault" "$slow" "$steps" "$i" "$rc" "$start" "$end" >> "$out/results.run$i.jsonl" <<'PYEOF'
import json, sys
path, fault, slow, steps, i, rc, t0, t1 = sys.argv[1:]
try:
    j = json.load(open(path))
except Exception as e:
    print(json.dumps({"run": int(i), "fault": fault, "slow_rank": int(slow), "error": str(e), "job_rc": int(rc)}))
    sys.exit()
v = j.get("verdict", {})
got = v.get("workers", [])
got_rank = got[0].rsplit(":rank", 1)[-1] if got else None
want_kind = "none" if fault == "none" else "one-straggler"
ok_kind = v.get("kind") == want_kind
ok_rank = fault == "none" or (got_rank == slow)
ok_cause = fault == "none" or v.get("cause") == {"cpu": "host"}.get(fault, fault)
print(json.dumps({"run": int(i), "fault": fault, "slow_rank": int(slow), "job_rc": int(rc), "wall_s": float(t1) - float(t0),
                  "steps_expected": int(steps), "steps_found": j["steps"]["count"], "steps_found_total": j["steps"]["found"],
                  "step_source": j["steps"]["source"], "sync_points": v.get("sync_points"),
                  "verdict": v.get("kind"), "workers": got, "cause": v.get("cause"), "confidence": v.get("confidence"),
                  "excess_ms": v.get("excess_ms"), "recorded_ms": v.get("recorded_ms"),
                  "ok_kind": ok_kind, "ok_rank": ok_kind and ok_rank, "ok_cause": ok_kind and ok_rank and ok_cause,
                  "kair_top": j["stragglers"][0] if j.get("stragglers") else None}))
PYEOF
  if [[ -n "${KEEP:-}" ]]; then mkdir -p "$KEEP"; mv -f "$rec" "$KEEP/run$i.sdb"
  elif [[ -n "${KEEP_MISSES:-}" ]] && ! grep -q '"ok_cause": true' "$out/results.run$i.jsonl"; then
    mkdir -p "$KEEP_MISSES"; mv -f "$rec" "$KEEP_MISSES/run$i.sdb"; fi
  rm -f "$rec" "$rec"-*
}
ncpu=$(nproc)
bg_cpus=${BG_CPUS-}; [[ -z ${BG_CPUS+x} ]] && (( ncpu > 8 )) && bg_cpus="$((ncpu / 2))-$((ncpu - 1))"  # BG_CPUS=LIST: there
t_begin=$(date +%s)
i=0
for fault in "${plan[@]}"; do
  # MAX_S: start no run after this many seconds (a device command may last 10 minutes; a run takes 30-45 s)
  if [[ -n "${MAX_S:-}" ]] && (( $(date +%s) - t_begin > MAX_S )); then echo "stopped after $i runs (MAX_S)"; break; fi
  slow=-1; [[ $fault != none ]] && slow=$((RANDOM % ranks))
  rec="$w/run$i.sdb"
  start=$(date +%s.%N)
  read -r -a cmd <<< "$(job_cmd $((${PORT_BASE:-29700} + i)))"  # PORT_BASE: batches side by side
  "$BIN" record -q "${layers[@]}" -o "$rec" -- "${cmd[@]}" --steps "$steps" --slow-rank "$slow" --fault "$fault" \
    --delay-ms "$delay" > "$w/run$i.log" 2>&1
  rc=$?
  end=$(date +%s.%N)
  tail -3 "$w/run$i.log" > "$out/reports/run$i.job.txt"
  if [[ -n "$bg_cpus" ]]; then
    while (( $(jobs -rp | wc -l) >= 4 )); do wait -n; done
    taskset -c "$bg_cpus" bash -c "$(declare -f score_run); $(declare -p BIN PY out steps); export KEEP=${KEEP:-} KEEP_MISSES=${KEEP_MISSES:-}; score_run $i $fault $slow $rc $start $end $rec" &
  else
    score_run "$i" "$fault" "$slow" "$rc" "$start" "$end" "$rec"
  fi
  i=$((i + 1))
done
wait
for ((k = 0; k < i; k++)); do cat "$out/results.run$k.jsonl" 2>/dev/null; rm -f "$out/results.run$k.jsonl"; done > "$out/results.jsonl"
"$PY" - "$out/results.jsonl" > "$out/score.txt" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def frac(sel, key):
    s = [r for r in rows if sel(r)]
    return f"{sum(1 for r in s if r.get(key)) }/{len(s)}"
print("clean runs reported none:", frac(lambda r: r["fault"] == "none", "ok_kind"))
print("slowed runs, rank right:", frac(lambda r: r["fault"] != "none", "ok_rank"))
print("slowed runs, rank and cause right:", frac(lambda r: r["fault"] != "none", "ok_cause"))
for f in ("compute", "host", "gpu", "cpu"):
    print(f"  {f}: rank {frac(lambda r: r['fault'] == f, 'ok_rank')}, cause {frac(lambda r: r['fault'] == f, 'ok_cause')}")
ok_steps = [r for r in rows if "steps_found" in r and abs(r["steps_found"] - r["steps_expected"]) <= max(1, r["steps_expected"] // 100)]
print(f"step count within 1 %: {len(ok_steps)}/{len(rows)}")
for r in rows:
    print(json.dumps({k: r.get(k) for k in ("run", "fault", "slow_rank", "verdict", "workers", "cause", "confidence",
                                             "steps_found", "step_source", "excess_ms", "recorded_ms")}))
PYEOF
cat "$out/score.txt"
