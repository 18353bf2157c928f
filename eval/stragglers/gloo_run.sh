#!/bin/bash
# Real straggler runs on this machine: data-parallel training with gloo on CPU (Debian's torch 1.13 at
# /usr/bin/python3), one rank slowed (a delay inside one operator: cause class compute; or between backward
# and all-reduce: cause class edge), a profiler trace per rank, then `stackscope stragglers`. Repeats with a
# random slowed rank and fault, and prints one line per run plus the score.
#   eval/stragglers/gloo_run.sh [RUNS=5] [RANKS=8] [STEPS=10] [DELAY_MS=120]
# STACKSCOPE=path/to/stackscope overrides the binary (default: the newest build*/src/cli/stackscope).
set -euo pipefail
RUNS=${1:-5}; RANKS=${2:-8}; STEPS=${3:-10}; DELAY=${4:-120}
HERE=$(cd "$(dirname "$0")" && pwd); ROOT=$(cd "$HERE/../.." && pwd)
BIN=${STACKSCOPE:-$(ls -t "$ROOT"/build*/src/cli/stackscope | head -1)}
PY=${PYTHON:-/usr/bin/python3}
WORK=$(mktemp -d /tmp/straggler-gloo.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
ok_rank=0; ok_class=0
for ((i = 0; i < RUNS; i++)); do
  slow=$((RANDOM % RANKS))
  if ((RANDOM % 2)); then fault=compute; want=compute; else fault=edge; want=edge; fi
  out="$WORK/run$i"
  "$PY" "$HERE/gloo_train.py" --ranks "$RANKS" --steps "$STEPS" --slow-rank "$slow" --fault "$fault" \
    --delay-ms "$DELAY" --port $((29600 + i)) --out "$out" > "$out.log" 2>&1 || { cat "$out.log"; exit 1; }
  files=$(for ((r = 0; r < RANKS; r++)); do echo "$out/rank$r.json"; done)
  # shellcheck disable=SC2086
  "$BIN" stragglers --json --html "$out.html" $files > "$out.report.json"
  read -r got_rank got_class got_cause < <("$PY" -c '
import json,sys
j=json.load(open(sys.argv[1]))
rc=j["root_causes"][0] if j["root_causes"] else {"class":"none","kind":"none","operation":""}
print(j["stragglers"][0], rc["class"], (rc["kind"]+":"+rc["operation"]).replace(" ","_"))' "$out.report.json")
  [[ "$got_rank" == "rank$slow" ]] && ok_rank=$((ok_rank + 1))
  [[ "$got_rank" == "rank$slow" && "$got_class" == "$want" ]] && ok_class=$((ok_class + 1))
  echo "run $i: slowed rank$slow ($fault) -> straggler $got_rank, class $got_class ($got_cause)"
done
echo "rank correct $ok_rank/$RUNS, rank+class correct $ok_class/$RUNS"
