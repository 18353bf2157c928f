#!/usr/bin/env bash
# Step-time overhead of `stackscope record` on one workload, by layer set, in interleaved rounds in ONE run:
# each round runs the workload bare, then under `stackscope record [--layers L] -- CMD` for each layer set
# (nvml,host; cuda,nccl,nvml,host; default; default --detail full where `record --help` lists --detail),
# fresh processes, the order flipped every round. Per configuration: median step time and its ratio to bare,
# the stop time (SIGINT -> recorder exit, and until the kernel's BPF links/programs are back to their count
# before the run), and the recording's events and drops (`stackscope info --json`). Writes OUT/WORKLOAD.md and
# OUT/WORKLOAD.json. Root needed (the recorder's uprobes). The logic is in overhead_rounds.py.
#
# --attach-pairs (anywhere among the options): the whole recording's cost inside ONE job process instead
# (attach_pairs.py): the workload steps until stopped and `stackscope record --pid PID --duration D` alternates with
# gaps of no recording, ROUNDS times per configuration; attached steps against the gaps' steps, per alternation.
# Options there: --duration D --gap G --configs "default=;nvml,host=--layers nvml,host" --check-probes (compare
# the probes of `record --pid` and `record -- CMD` first). Writes OUT/WORKLOAD.attach.md and .json.
# Its precise estimate (bench/overhead/bracketed_cost.py): each recording's steady span of whole budget
# periods against the line through the gaps around it, a 95 % interval over the alternations, the gaps' null and a
# verdict against --target (0.02); `sham=` in --configs adds A/A alternations (no recorder). Many short alternations
# (--duration 8 --gap 3, one configuration, a large ROUNDS with --budget-s) are what narrow it:
# eval/tracing/gpu_attach_launch_bound.sh. Pool lanes: attach_pairs.py --combine A.json B.json --out DIR.
#
# Usage: bench/overhead/run_overhead.sh WORKLOAD OUT [ROUNDS] [more overhead_rounds.py options]
#   WORKLOAD: launch_bound | launch_bound_graph | small_batch_infer | tiny_ops_cpu | gpt2
#   environment: STACKSCOPE (default build/src/cli/stackscope), PYTHON (a python with torch; default the first of
#   /opt/torch/.venv/bin/python3, python3, /usr/bin/python3 that imports torch)
# Examples:
#   sudo bench/overhead/run_overhead.sh tiny_ops_cpu /tmp/ovh 4
#   sudo bench/overhead/run_overhead.sh launch_bound /tmp/ovh 4 --workload-args "--pause 3"
#   sudo bench/overhead/run_overhead.sh gpt2 /tmp/ovh 3 --configs "bare;default=;nvml,host=--layers nvml,host"
#   sudo bench/overhead/run_overhead.sh launch_bound /tmp/ovh 3 --attach-pairs --duration 10 --gap 5 \
#     --configs "default=;nvml,host=--layers nvml,host" --workload-args "--device cpu --width 32 --depth 4 --batch 4"
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
workload=${1:?WORKLOAD}; out=${2:?OUT}; rounds=${3:-4}
shift $(( $# < 3 ? $# : 3 ))
stackscope=${STACKSCOPE:-$root/build/src/cli/stackscope}
if [[ -z ${PYTHON:-} ]]; then
  for p in /opt/torch/.venv/bin/python3 "$(command -v python3 || true)" /usr/bin/python3; do
    [[ -x $p ]] && "$p" -c "import torch" 2>/dev/null && { PYTHON=$p; break; }
  done
fi
[[ -n ${PYTHON:-} ]] || { echo "no python with torch found (set PYTHON)" >&2; exit 1; }
[[ -x $stackscope ]] || { echo "no stackscope binary at $stackscope (set STACKSCOPE)" >&2; exit 1; }
mountpoint -q /sys/kernel/tracing 2>/dev/null || mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
ulimit -l unlimited 2>/dev/null || true
script=overhead_rounds.py; args=()
for x in "$@"; do
  if [[ $x == --attach-pairs ]]; then script=attach_pairs.py; else args+=("$x"); fi
done
exec "$PYTHON" "$here/$script" --workload "$workload" --out "$out" --rounds "$rounds" \
  --stackscope "$stackscope" --python "$PYTHON" "${args[@]}"
