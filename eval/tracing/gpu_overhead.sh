#!/usr/bin/env bash
# Tracing overhead on one GPU (issue 14, item 5), one call under the device tool's 10 minutes (8 min, TOTAL_S):
#   1. build/bench/uprobe_cost: ns per call bare, under a minimal uprobe / uretprobe, under stackscope's programs
#   2. launch_bound (small kernels, 4 rounds x every layer set), 3. GPT-2 (3 rounds), 4. small-batch inference and
#   5. the CUDA-graph replay of the launch-bound step (2 rounds each), all by bench/overhead/run_overhead.sh,
#   6. the figure (overhead against CUDA calls/s) where the python has matplotlib.
# Each part has its own time box and a failing part does not stop the others. Results: OUT/summary.md (every
# table), OUT/overhead.tgz (the JSON and logs of every part), OUT/overhead_vs_calls.svg (if drawn).
# Usage (GPU machine, repo root, build/ carried): bash eval/tracing/gpu_overhead.sh OUT
#   environment: STACKSCOPE (default build/src/cli/stackscope), UPROBE_COST (default build/bench/uprobe_cost; a
#   copy elsewhere finds stackscope's *.bpf.o in gen/ beside it), TOTAL_S (480: seconds for the whole), PYTHON
#   (default /opt/torch/.venv/bin/python3, else the first python3 with torch), ROUNDS_LAUNCH (4), ROUNDS_GPT2 (3),
#   ROUNDS_SMALL (2); workload arguments LAUNCH_ARGS ("--pause 1"), GPT2_ARGS ("--steps 30 --warmup 8 --pause 1"),
#   INFER_ARGS ("--pause 1")
# Stripped copies fit the device tool's carry (64 MiB):
#   mkdir -p .carry/gen && strip -o .carry/stackscope build/src/cli/stackscope &&
#   strip -o .carry/uprobe_cost build/bench/uprobe_cost && cp build/gen/cuda.bpf.o build/gen/torch.bpf.o .carry/gen/
#   STACKSCOPE=.carry/stackscope UPROBE_COST=.carry/uprobe_cost bash eval/tracing/gpu_overhead.sh "$OUT"
set -uo pipefail
out=${1:?OUT}
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
mkdir -p "$out"
out=$(cd "$out" && pwd)
w=$(mktemp -d /tmp/gpu_overhead.XXXX)
export STACKSCOPE=${STACKSCOPE:-$root/build/src/cli/stackscope}
if [[ -z ${PYTHON:-} ]]; then
  for p in /opt/torch/.venv/bin/python3 "$(command -v python3 || true)" /usr/bin/python3; do
    [[ -x $p ]] && "$p" -c "import torch" 2>/dev/null && { PYTHON=$p; break; }
  done
fi
export PYTHON=${PYTHON:-python3} PYTHONUNBUFFERED=1
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
ulimit -l unlimited 2>/dev/null || true
t0=$SECONDS
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.used,utilization.gpu --format=csv,noheader 2>/dev/null | head -1)
machine="${gpu:-no GPU seen by nvidia-smi}, $(nproc) cores"
{
  echo "# Tracing overhead on one GPU ($(date -u +%FT%TZ))"
  echo
  echo "- machine: $machine; kernel $(uname -r)"
  echo "- stackscope: $STACKSCOPE ($(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'));" \
       "record options: $("$STACKSCOPE" record --help 2>/dev/null | grep -oE -- '--(budget|detail)[^ ]*' | sort -u | tr '\n' ' ')"
  echo "- python: $PYTHON ($("$PYTHON" -c 'import torch; print(torch.__version__, torch.cuda.is_available())' 2>&1 | tail -1))"
  echo
} > "$w/summary.md"
cat "$w/summary.md"

# part NAME SECONDS CMD...: runs CMD with a time box, its output in $w/NAME.log; never fails the script.
part() {
  local name=$1 box=$2; shift 2
  echo "== $name (box ${box}s, at $((SECONDS - t0))s)"
  timeout -k 5 "$box" "$@" > "$w/$name.log" 2>&1
  local rc=$?
  echo "   rc=$rc after $((SECONDS - t0))s"
  tail -4 "$w/$name.log" | sed 's/^/   /'
  [[ $rc == 0 ]] || echo "- $name: rc $rc (log in overhead.tgz: $name.log)" >> "$w/failures.md"
}
overhead() {  # overhead NAME BOX ROUNDS CONFIGS WORKLOAD_ARGS
  local name=$1 box=$2 rounds=$3 configs=$4 wargs=$5
  part "$name" "$box" "$PYTHON" bench/overhead/overhead_rounds.py --workload "$name" --out "$w" --rounds "$rounds" \
    --stackscope "$STACKSCOPE" --python "$PYTHON" --machine "$machine" --budget-s $((box - 8)) --timeout 90 \
    --probe-wait 8 ${configs:+--configs "$configs"} --workload-args "$wargs"
}
# The configurations of the smaller parts: bare, the default recording, and --detail full where it exists.
few="bare;default="
"$STACKSCOPE" record --help 2>/dev/null | grep -q -- '--detail' && few="$few;default --detail full=--detail full"

# The instruction each real probe target begins with (emulated push: one trap; endbr64 and others: two).
targets=$(timeout 30 "$PYTHON" bench/overhead/probe_targets.py 2>"$w/probe_targets.err" | sed 's/^/--first-insn /')
uprobe_cost=${UPROBE_COST:-build/bench/uprobe_cost}
# With the budgeted tracer (record --detail): also its entry-only CUDA probe (cookie bit 34) and in-kernel torch counts.
probes=()
if [[ $few == *detail* ]]; then
  probes=(--probe cuda.bpf.o:call_entry,call_return --probe cuda.bpf.o:call_entry@cookie=0x400000000
          --probe torch.bpf.o:op_entry,op_return --probe torch.bpf.o:op_entry,op_return@aggregate=1)
fi
if [[ -x $uprobe_cost ]]; then
  part uprobe_cost 45 "$uprobe_cost" --calls 300000 --json "$w/uprobe_cost.json" $targets "${probes[@]}"
else
  echo "- uprobe_cost: $uprobe_cost missing" >> "$w/failures.md"
fi
# share W OF: a part's time box, W/OF of what is left of $total (what a part leaves unused goes to the later ones).
total=${TOTAL_S:-480}
share() { local left=$(( total - (SECONDS - t0) )); (( left < 30 )) && left=30; echo $(( left * $1 / $2 )); }
overhead launch_bound "$(share 220 430)" "${ROUNDS_LAUNCH:-4}" "" "${LAUNCH_ARGS:---pause 1}"
overhead gpt2 "$(share 110 210)" "${ROUNDS_GPT2:-3}" "$few" "${GPT2_ARGS:---steps 30 --warmup 8 --pause 1}"
overhead small_batch_infer "$(share 50 100)" "${ROUNDS_SMALL:-2}" "$few" "${INFER_ARGS:---pause 1}"
overhead launch_bound_graph "$(share 50 50)" "${ROUNDS_SMALL:-2}" "$few" "${LAUNCH_ARGS:---pause 1}"

{
  if [[ -s $w/uprobe_cost.log ]]; then
    echo "### uprobe_cost (per call, 300 k calls of a tiny function)"; echo; echo '```'
    cat "$w/uprobe_cost.log"; echo '```'; echo
  fi
  for n in launch_bound gpt2 small_batch_infer launch_bound_graph; do
    [[ -s $w/$n.md ]] && { cat "$w/$n.md"; echo; }
  done
  [[ -s $w/failures.md ]] && { echo "### Parts that failed"; cat "$w/failures.md"; }
} >> "$w/summary.md"
for py in "$PYTHON" /usr/bin/python3 python3; do
  "$py" bench/overhead/plot_overhead.py "$w" -o "$out/overhead_vs_calls.svg" >> "$w/plot.log" 2>&1 && break
done
cp "$w/summary.md" "$out/summary.md"
tar -C "$w" -czf "$out/overhead.tgz" . && rm -rf "$w"
echo "== done in $((SECONDS - t0))s"; cat "$out/summary.md"; ls -la "$out"
