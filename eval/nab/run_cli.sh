#!/usr/bin/env bash
# NAB through the command line (nab_cli_eval.py): import + analyze with the defaults on all 45 files, NAB's
# standard scoring, the threshold chosen on half of the files, compared per file with NAB's published scores.
# usage: eval/nab/run_cli.sh [BUILD_DIR=build] [OUT=/tmp/nab_cli] [thresholds, comma-separated]
# (default grid: 0.03,0.04,0.045,0.05,0.055,0.06,0.065,0.07,0.08,0.1, as in docs/benchmarks/host-series-nab.md)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
out=${2:-/tmp/nab_cli}
python3 "$root/eval/nab/nab_cli_eval.py" "$build/src/cli/stackscope" "${NAB_DIR:-$root/../shared/data/nab}" "$out" ${3:+"$3"}
