#!/usr/bin/env bash
# The table-building stage of `analyze` at scale: every layer's 1 s window tables of a one-hour recording of a busy
# GPU job (about 60 M events), in one streaming pass, with wall time, CPU time and peak RSS (target: <= 40 s,
# <= 700 MB).
# Generates the recording first (bench/analyze_scale.cpp generate, deterministic, about 6 min of CPU and 570 MB)
# unless REC exists. With BEFORE=/path/to/an/older/stackscope, also times that binary's `features --layer L` for
# each layer (how the tables were built before: one pass per layer, one 24-byte record per event).
# Usage: bench/analyze_scale.sh BUILD_DIR [REC] [SECONDS]
set -euo pipefail
build=${1:?usage: bench/analyze_scale.sh BUILD_DIR [REC] [SECONDS]}
rec=${2:-/tmp/stackscope-scale-3600s.sdb}
seconds=${3:-3600}
bench="$build/bench/analyze_scale"
[ -f "$rec" ] || "$bench" generate "$rec" --seconds "$seconds"
ls -l "$rec"
measure() { /usr/bin/time -f "  -> %e s wall, %U s user + %S s sys CPU, %M KB peak RSS, %P of a core" "$@"; }
echo "== one pass, every layer's tables (store/recording_window_tables.h)"
measure "$bench" tables "$rec"
echo "== where the time goes (separate passes)"
"$bench" phases "$rec"
if [ -n "${BEFORE:-}" ]; then
  echo "== before: $BEFORE features, one layer at a time"
  out=$(mktemp -d)
  for l in cuda torch python nccl nvml host; do
    echo "$l:"
    measure "$BEFORE" features "$rec" --layer "$l" -o "$out/$l.csv" >/dev/null
  done
  rm -rf "$out"
fi
