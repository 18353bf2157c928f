#!/usr/bin/env bash
# Peak memory of `stackscope analyze --detector reveal` on a long synthetic recording (bench/reveal_memory_bench.cpp:
# SERIES series every PERIOD_MS for DAYS days, one 120 s CPU anomaly at 60% of the run).
# usage: bench/reveal_memory.sh BUILD_DIR [DAYS=7] [SERIES=100] [PERIOD_MS=1000] [STACKSCOPE=BUILD_DIR/src/cli/stackscope]
# Prints the generator's summary, then wall time and peak RSS of the analysis and whether the anomaly was found.
set -euo pipefail
build=${1:?BUILD_DIR}; days=${2:-7}; series=${3:-100}; period=${4:-1000}
bin=${STACKSCOPE:-$build/src/cli/stackscope}
dir=${OUT:-$(mktemp -d /tmp/reveal-memory.XXXXXX)}
rec="$dir/week-${days}d-${series}s.sdb"
[ -f "$rec" ] || "$build/bench/reveal_memory_bench" "$rec" "$days" "$series" "$period" | tee "$dir/gen.json"
ls -la "$rec"
/usr/bin/time -v "$bin" analyze --detector reveal --json --no-store "$rec" > "$dir/report.json" 2> "$dir/time.txt" || true
grep -E "Elapsed|Maximum resident" "$dir/time.txt"
/usr/bin/python3 - "$dir/report.json" "$dir/gen.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["reveal"]; g = json.load(open(sys.argv[2]))
a, b = g["anomaly_s"]
r = j["recordings"][0]
hits = [f for f in j["findings"] if f["t_end_s"] > a and f["t_start_s"] < b + 3]
print(f"windows {r['windows']}, feature columns {r['feature_columns']}, fitted on {r['fit_windows']} "
      f"(sample: {r['fit_on_sample']}), findings {len(j['findings'])}; anomaly at {a:.0f}-{b:.0f}s:",
      "FOUND " + hits[0]["subsystem"] + " " + hits[0]["subject"] if hits else "NOT FOUND")
PY
