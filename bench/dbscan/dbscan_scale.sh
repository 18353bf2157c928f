#!/usr/bin/env bash
# DBSCAN at scale: `stackscope detect --method dbscan` over a ROWS x 16 numeric CSV, fit (sub-sampled to
# 20,000 rows) and every row scored, with wall time, CPU time and peak RSS. Two tables (bench/dbscan/make_table.py,
# deterministic): "structured" (rows on a 3-factor surface in 16 columns plus noise, as window features are; the
# kd-tree prunes) and "noise" (i.i.d. normal columns: the worst case, where the index falls back to brute force).
# With BEFORE=/path/to/an/older/stackscope, also times that binary on the same tables.
# Usage: bench/dbscan/dbscan_scale.sh STACKSCOPE_BIN [ROWS=1000000] [OUT_DIR=/tmp/stackscope-dbscan]
set -euo pipefail
bin=${1:?usage: bench/dbscan/dbscan_scale.sh STACKSCOPE_BIN [ROWS] [OUT_DIR]}
rows=${2:-1000000}
out=${3:-/tmp/stackscope-dbscan}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
measure() { /usr/bin/time -f "  -> %e s wall, %U s user + %S s sys CPU, %M KB peak RSS" "$@"; }
for kind in structured noise; do
  csv="$out/$kind-$rows.csv"
  [ -f "$csv" ] || /usr/bin/python3 "$here/make_table.py" "$kind" "$rows" "$csv"
  for b in "$bin" ${BEFORE:-}; do
    echo "== $kind, $rows x 16: $b detect --method dbscan"
    measure "$b" detect --method dbscan --input "$csv" --output "$out/scores-$kind.csv" 2>&1 |
      grep -E -- '->|anomalous|rror' || true
  done
done
