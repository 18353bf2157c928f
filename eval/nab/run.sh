#!/usr/bin/env bash
# The earlier in-process study of the Reveal ensemble on NAB (not the command line a user runs: for that, and for
# all 45 files against NAB's published detectors, see run_cli.sh).
# Builds eval/nab/reveal_nab_eval against a stackscope build directory and scores NAB's realAWSCloudwatch files
# with our NAB scorer: NAB's Windowed Gaussian (peer, checked against NAB's published per-file scores) and the
# Reveal ensemble (probation-fitted and streaming).
# usage: eval/nab/run.sh [BUILD_DIR=build] [window_rows=12] [fixed_threshold=1.0] [refit_rows=100] [hold_rows=50]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
out=$build/reveal_nab_eval
ninja -C "$build" stackscope_store stackscope_analyze stackscope_model >/dev/null
c++ -O2 -std=gnu++20 -DFMT_HEADER_ONLY -DSTACKSCOPE_NAB_EVAL_DIR="\"$root/eval/nab\"" -I"$root/src" \
  -isystem /usr/include/eigen3 "$root/eval/nab/reveal_nab_eval.cpp" \
  -o "$out" "$build/src/store/libstackscope_store.a" "$build/src/analyze/libstackscope_analyze.a" \
  "$build/src/model/libstackscope_model.a" /usr/lib/x86_64-linux-gnu/libsqlite3.a /usr/lib/x86_64-linux-gnu/libzstd.a \
  -lpthread -ldl
"$out" "${NAB_DIR:-$root/../shared/data/nab}" "${2:-12}" "${3:-1.0}" "${4:-100}" "${5:-50}"
