#!/usr/bin/env bash
# Issue 14 (one H100 or H200, about 7 minutes): torch operator counts of a default recording (every layer,
# --detail budgeted, --budget 1: the torch family duty-cycled, its counts estimated as the end note states: from the
# blocking CUDA syncs where the job has them, else the job's CPU time) against torch.profiler, on GPU jobs: small-batch
# inference (infer: ~360 k aten calls/s on H200, launch-bound) and the launch-bound MLP training step (launch); each
# also once with --detail full (exact counts expected). Workload: eval/tracing/op_count_check.py (profiler's calls
# per step x the loop's steps); comparison: eval/tracing/op_count_compare.py. Results under $OUT:
# <workload>_<mode>.{md,json}, the recordings' notes, logs.
# Run (lead, from the merged tree):
#   mkdir -p .carry && strip -o .carry/stackscope build/src/cli/stackscope
#   device run, carry [".carry"]: OUT=$OUT bash eval/tracing/gpu_op_counts.sh
set -u
STACKSCOPE=${STACKSCOPE:-.carry/stackscope}
PYTHON=${PYTHON:-/opt/torch/.venv/bin/python3}
# The default budget's period is 5-20 s: 100 s of loop gives 8-20 windows (the error needs three blocks of four).
SECONDS_BUDGETED=${SECONDS_BUDGETED:-100}
SECONDS_FULL=${SECONDS_FULL:-8}
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader | head -1 > "$OUT/machine.txt"
run() {  # workload mode seconds [record options]
  local w=$1 mode=$2 secs=$3
  shift 3
  local tag="${w}_${mode}" rec="/tmp/${w}_${mode}.sdb"
  rm -f "$rec"
  timeout 240 "$STACKSCOPE" record -o "$rec" "$@" -- "$PYTHON" eval/tracing/op_count_check.py --workload "$w" \
    --seconds "$secs" --quiet 3 --out "$OUT/$tag.truth.json" > "$OUT/$tag.log" 2>&1
  echo "== $tag (record rc $?)"
  "$STACKSCOPE" info "$rec" --json > "$OUT/$tag.info.json" 2>>"$OUT/$tag.log"
  "$PYTHON" -c 'import json,sys; [print("  note:", n["text"][:600]) for n in json.load(open(sys.argv[1])).get("notes", []) if n["text"].startswith(("torch:", "recorder CPU"))]' "$OUT/$tag.info.json" 2>/dev/null
  if [ "$mode" = full ]; then
    "$STACKSCOPE" export "$rec" --format csv --what events -o "/tmp/$tag.events.csv" 2>>"$OUT/$tag.log"
    "$PYTHON" eval/tracing/op_count_compare.py --truth "$OUT/$tag.truth.json" --events "/tmp/$tag.events.csv" \
      --json "$OUT/$tag.json" | tee "$OUT/$tag.md"
  else
    "$STACKSCOPE" export "$rec" --format csv --what samples -o "/tmp/$tag.samples.csv" 2>>"$OUT/$tag.log"
    "$PYTHON" eval/tracing/op_count_compare.py --truth "$OUT/$tag.truth.json" --samples "/tmp/$tag.samples.csv" \
      --info "$OUT/$tag.info.json" --json "$OUT/$tag.json" | tee "$OUT/$tag.md"
    # the torch series kept (operators' counts, the watched windows): what the comparison read, for a second look
    { head -1 "/tmp/$tag.samples.csv"; grep -E '^"?(torch\.op\.calls|trace\.torch\.watching)' "/tmp/$tag.samples.csv"; } \
      | gzip > "$OUT/$tag.torch_samples.csv.gz"
  fi
  rm -f "$rec" "/tmp/$tag.events.csv" "/tmp/$tag.samples.csv"
}
run infer budgeted "$SECONDS_BUDGETED"
run launch budgeted "$SECONDS_BUDGETED"
run infer full "$SECONDS_FULL" --detail full
run launch full "$SECONDS_FULL" --detail full
[ -n "${WITH_TINY:-}" ] && run tiny budgeted "$SECONDS_BUDGETED"  # the tiny-operator loop on the GPU machine's CPU
