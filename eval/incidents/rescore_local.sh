#!/usr/bin/env bash
# Re-scores kept recordings of benchmark v2 with another stackscope, on any machine (no GPU needed): for each
# X.sdb (its fault log X.faults.jsonl beside it, or in FAULTS_DIR), `analyze --json --no-store` (the recording is
# left as it is) and the online replay (`analyze --online-log`: what record --detect would have printed with this
# engine, for detection and cause delays), then eval/incidents/score.py over them all.
# Usage: eval/incidents/rescore_local.sh STACKSCOPE OUT X.sdb [Y.sdb ...]   (results: OUT/score.md, OUT/score.json)
# A recording without a fault log of its own scores as a clean run when CLEAN_OK=1 (a meta line is written).
# ANALYZE_ARGS: more analyze options (e.g. the hidden --episodes-v1: the episode thresholds the engine had first).
set -uo pipefail
S=${1:?STACKSCOPE}; out=${2:?OUT}; shift 2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
for rec in "$@"; do
  x=$(basename "$rec" .sdb)
  f=${FAULTS_DIR:-$(dirname "$rec")}/$x.faults.jsonl
  if [[ -f $f ]]; then
    cp "$f" "$out/$x.faults.jsonl"
  elif [[ ${CLEAN_OK:-0} == 1 ]]; then
    echo "{\"kind\": \"meta\", \"workload\": \"$x\", \"note\": \"no fault log: scored as a clean run\"}" > "$out/$x.faults.jsonl"
  else
    echo "rescore_local.sh: $f missing (CLEAN_OK=1 scores $rec as a clean run)" >&2; exit 2
  fi
  # shellcheck disable=SC2086
  "$S" analyze --no-store --json --online-log "$out/$x.online.jsonl" ${ANALYZE_ARGS:-} "$rec" > "$out/$x.analysis.json" \
    2> "$out/$x.analyze.err" || echo "rescore_local.sh: analyze failed on $rec (see $out/$x.analyze.err)" >&2
done
/usr/bin/python3 "$here/score.py" "$out" --md "$out/score.md" --json "$out/score.json"
