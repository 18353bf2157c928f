#!/usr/bin/env bash
# The agent's CPU beside one traced job against `stackscope record` of the same job, per thread, in interleaved rounds
# (the target: "<= 2 % of a core beyond record"): each round runs, one after the other, every agent binary given and
# then `record`, each beside a fresh copy of the job, and measures the process's CPU by thread over S seconds from
# /proc/PID/task/*/stat (utime + stime). Two agent binaries (before and after a change) give the change's effect with
# the load of the machine spread over both.
# Usage (root, repo root): OUT=/tmp/rounds ROUNDS=3 S=30 bench/agent/agent_vs_record_rounds.sh \
#     LABEL=AGENT_BIN [LABEL=AGENT_BIN...] -- RECORD_BIN [JOB_COMMAND...]
#   On a machine without a GPU, LD_LIBRARY_PATH=build/tests/progs/fake_nvml gives the agent a node NVML sampler that a
#   traced job consumes, so that the node leaves its idle schedule beside the job as on a GPU host.
#   JOB_COMMAND defaults to a copy of the bundled CPU workload (workloads/cpu_train.py, Debian's python3-torch) named
#   after this run, and FILTER (the agent's discovery.command_filter) to that name, so that other torch processes on
#   the machine are not traced.
# Writes $OUT/rounds.jsonl (one line a measurement: label, round, cpu, by thread) and prints a summary by label.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:?set OUT}
ROUNDS=${ROUNDS:-3}
S=${S:-30}
mkdir -p "$OUT"
agents=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do agents+=("$1"); shift; done
[ "${1:-}" = -- ] && shift
RECORD=${1:?RECORD binary}; shift
job=("$@")
if [ ${#job[@]} -eq 0 ]; then
  cp workloads/cpu_train.py "$OUT/rounds_job_$$.py"
  job=(/usr/bin/python3 "$OUT/rounds_job_$$.py" --seconds $((S + 60)))
  FILTER=${FILTER:-rounds_job_$$}
fi
FILTER=${FILTER:?set FILTER to a regex of the job command}
hz=$(getconf CLK_TCK)
tree() { local c; for c in $(pgrep -P "$1"); do tree "$c"; done; echo "$1"; }
kill_tree() { kill $(tree "$1") 2>/dev/null || true; }
# "name ticks" of each live thread of process $1 (names with spaces joined by _), summed by name.
by_thread() {
  local t
  for t in /proc/$1/task/*; do cat "$t/stat" 2>/dev/null || true; done |
    awk '{c = $0; sub(/^[^(]*\(/, "", c); sub(/\).*$/, "", c); gsub(/ /, "_", c);
          r = $0; sub(/^.*\) /, "", r); split(r, f, " "); by[c] += f[12] + f[13]}
         END {for (k in by) print k, by[k]}' | sort
}
# Measures process $1 over S seconds; appends a JSON line labelled $2.
measure() {
  local pid=$1 label=$2 before after t0 t1
  before=$(by_thread "$pid"); t0=$(date +%s.%N)
  sleep "$S"
  after=$(by_thread "$pid"); t1=$(date +%s.%N)
  join <(echo "$before") <(echo "$after") | awk -v d="$(echo "$t1 - $t0" | bc)" -v hz="$hz" -v label="$label" \
    -v round="$r" -v load="$(cut -d' ' -f1 /proc/loadavg)" '
    {v = ($3 - $2) / hz / d; tot += v; if (v > 0) by = by sprintf("%s\"%s\": %.5f", by == "" ? "" : ", ", $1, v)}
    END {printf "{\"label\": \"%s\", \"round\": %d, \"load1\": %s, \"cpu\": %.5f, \"by_thread\": {%s}}\n", label, round, load, tot, by}' |
    tee -a "$OUT/rounds.jsonl"
}
for r in $(seq "$ROUNDS"); do
  for a in "${agents[@]}"; do
    label=${a%%=*} bin=${a#*=}
    data=$(mktemp -d /tmp/agent-rounds-XXXXXX)
    # shellcheck disable=SC2086
    "$bin" agent --data-dir "$data" --listen 127.0.0.1:0 --set discovery.command_filter="$FILTER" ${AGENT_ARGS:-} \
      >"$OUT/agent-$label-$r.log" 2>&1 &
    agent=$!
    sleep 5
    "${job[@]}" >"$OUT/job-$label-$r.log" 2>&1 &
    jobpid=$!
    for _ in $(seq 300); do grep -q "tracing job .*-$jobpid " "$OUT/agent-$label-$r.log" && break; sleep 0.2; done
    if grep -q "tracing job .*-$jobpid " "$OUT/agent-$label-$r.log"; then
      sleep 10
      measure "$agent" "$label"
    else
      echo "round $r $label: job not traced" >&2
    fi
    kill_tree "$jobpid"; wait "$jobpid" 2>/dev/null || true
    kill -TERM "$agent"; wait "$agent" 2>/dev/null || true
    rm -rf "$data"
  done
  data=$(mktemp -d /tmp/agent-rounds-XXXXXX)
  "$RECORD" record -o "$data/r.sdb" -- "${job[@]}" >"$OUT/record-$r.log" 2>&1 &
  rec=$!
  sleep 15
  measure "$rec" record
  for c in $(pgrep -P "$rec"); do kill_tree "$c"; done
  for _ in $(seq 60); do kill -0 "$rec" 2>/dev/null || break; sleep 0.5; done
  kill -INT "$rec" 2>/dev/null || true; wait "$rec" 2>/dev/null || true
  rm -rf "$data"
done
python3 - "$OUT/rounds.jsonl" <<'PY'
import collections, json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = collections.defaultdict(list)
for x in rows: by[x["label"]].append(x)
rec = {x["round"]: x["cpu"] for x in by.get("record", [])}
for label, xs in by.items():
    cpus = [x["cpu"] for x in xs]
    line = f"{label}: cpu {statistics.mean(cpus) * 100:.2f} % of a core (rounds: " + ", ".join(f"{c * 100:.2f}" for c in cpus) + ")"
    if label != "record" and rec:
        d = [x["cpu"] - rec[x["round"]] for x in xs if x["round"] in rec]
        line += f"; beyond record in the same round: {statistics.mean(d) * 100:+.2f} % (" + ", ".join(f"{v * 100:+.2f}" for v in d) + ")"
    print(line)
    threads = collections.defaultdict(list)
    for x in xs:
        for k, v in x["by_thread"].items(): threads[k].append(v)
    print("   by thread (mean over rounds): " + ", ".join(f"{k} {sum(v) / len(xs) * 100:.2f}" for k, v in sorted(threads.items(), key=lambda kv: -sum(kv[1]))))
PY
