#!/usr/bin/env bash
# The agent's targets, measured on the machine it runs on: the agent's CPU on an idle node (<= 1 % of a core)
# and beside one traced job (<= 2 %, the agent process only: the probes' own cost lands in the job and is
# measured by eval/tracing), its RSS (<= 200 MB), the time of a /metrics scrape over HTTP (<= 50 ms) and how many
# series it carried, and how long after an injected CPU interference the incident shows in /metrics (<= 5 s).
#
# Usage (root, repo root): OUT=/tmp/agent-bench bench/agent/agent_bench.sh [JOB_COMMAND...]
#   AGENT: the stackscope-agent binary (default build/src/cli/stackscope-agent)
#   IDLE_S, JOB_S: seconds of each measurement (default 60 and 60)
#   AGENT_ARGS: more agent flags, e.g. "--set trace.interval=500ms"
#   RECORD: the stackscope binary for the baseline (default: stackscope beside AGENT; "" for none): after the
#     agent's phases, `stackscope record -o X -- JOB_COMMAND` of the same job, its recorder's CPU measured the same
#     way over JOB_S, so the agent's own share (what it adds to the job's tracing) is the difference
#   JOB_COMMAND: the traced job (default: the bundled CPU workload, Debian's python3-torch). On a GPU machine:
#     OUT=$OUT bench/agent/agent_bench.sh python3 eval/stragglers/ddp_job.py --steps 100000
#     On the CPU VM, a launcher and two ranks as torchrun starts them:
#     OUT=$OUT bench/agent/agent_bench.sh /usr/bin/python3 eval/stragglers/ddp_job.py --ranks 2 --steps 100000000
#   The in-process exposition of 8 GPUs x 700 series: build/bench/agent/agent_scrape_bench.
# Writes $OUT/agent_bench.json (with each phase's CPU by thread name, and where the agent's memory is:
# $OUT/agent_smaps.txt), the agent's log; prints the figures.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:?set OUT to a results directory}
AGENT=${AGENT:-build/src/cli/stackscope-agent}
IDLE_S=${IDLE_S:-60}
JOB_S=${JOB_S:-60}
RECORD=${RECORD-$(dirname "$AGENT")/stackscope}
mkdir -p "$OUT"
data=$(mktemp -d /tmp/agent-bench-XXXXXX)
job=("$@")
[ ${#job[@]} -gt 0 ] || job=(/usr/bin/python3 workloads/cpu_train.py --seconds $((JOB_S + 40)))

# shellcheck disable=SC2086
"$AGENT" agent --data-dir "$data" --listen 127.0.0.1:0 ${AGENT_ARGS:-} >"$OUT/agent.log" 2>&1 &
agent=$!
trap 'kill $agent 2>/dev/null || true; [ -z "${jobpid:-}" ] || kill_tree $jobpid; rm -rf "$data"' EXIT
port=""
for _ in $(seq 100); do
  port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$OUT/agent.log" | head -1)
  [ -n "$port" ] && break
  sleep 0.2
done
[ -n "$port" ] || { echo "agent did not start:"; cat "$OUT/agent.log"; exit 1; }
hz=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' /proc/${2:-$agent}/stat; }
rss_kb() { awk '/^VmRSS/ {print $2}' /proc/${1:-$agent}/status; }
hwm_kb() { awk '/^VmHWM/ {print $2}' /proc/${1:-$agent}/status; }
# "tid name ticks" of each live thread of process $1 (names with spaces joined by _).
thread_ticks() {
  local t s
  for t in /proc/$1/task/*; do
    s=$(cat "$t/stat" 2>/dev/null) || continue
    awk -v tid="${t##*/}" '{c = $0; sub(/^[^(]*\(/, "", c); sub(/\).*$/, "", c); gsub(/ /, "_", c);
                            r = $0; sub(/^.*\) /, "", r); split(r, f, " "); print tid, c, f[12] + f[13]}' <<<"$s"
  done
}
# CPU share of one core over $1 seconds, of process $2 (default the agent); its threads' shares by name (threads
# that ran the whole time; a thread that started or ended meanwhile counts only in the total) go to the variable
# named $3 as a JSON object.
cpu_share() {
  local t0 c0 t1 c1 before after pid=${2:-$agent}
  before=$(thread_ticks "$pid" | sort)
  t0=$(date +%s.%N); c0=$(cpu_ticks "" "$pid"); sleep "$1"; t1=$(date +%s.%N); c1=$(cpu_ticks "" "$pid")
  after=$(thread_ticks "$pid" | sort)
  if [ -n "${3:-}" ]; then
    printf -v "$3" '%s' "$(join <(echo "$before") <(echo "$after") |
      awk -v d="$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')" -v hz="$hz" '
        {by[$2] += ($5 - $3) / hz / d}
        END {n = 0; printf "{"; for (k in by) if (by[k] > 0) printf "%s\"%s\": %.4f", (n++ ? ", " : ""), k, by[k]; printf "}"}')"
  fi
  awk -v c0="$c0" -v c1="$c1" -v t0="$t0" -v t1="$t1" -v hz="$hz" 'BEGIN {printf "%.4f", (c1 - c0) / hz / (t1 - t0)}'
}
# Process $1's descendants, then itself: a launcher that dies on SIGTERM (ddp_job.py's) would leave its ranks running.
tree() {
  local c
  for c in $(pgrep -P "$1"); do tree "$c"; done
  echo "$1"
}
kill_tree() { kill $(tree "$1") 2>/dev/null || true; }
scrape_ms() {  # median of 20 scrapes, milliseconds
  for _ in $(seq 20); do curl -s -o /dev/null -w '%{time_total}\n' "http://127.0.0.1:$port/metrics"; done |
    sort -n | awk '{a[NR] = $1} END {printf "%.2f", a[int((NR + 1) / 2)] * 1000}'
}
series() { curl -s "http://127.0.0.1:$port/metrics" | grep -vc '^#'; }

sleep 5  # start-up (the node samplers' first passes)
idle_threads={}
cpu_share "$IDLE_S" "$agent" idle_threads >/tmp/agent-bench-share.$$
idle_cpu=$(cat /tmp/agent-bench-share.$$)
idle_rss=$(rss_kb)
idle_scrape=$(scrape_ms)
idle_series=$(series)
echo "idle: cpu $idle_cpu of a core, rss $((idle_rss / 1024)) MiB, scrape ${idle_scrape} ms over $idle_series series"
echo "  by thread: $idle_threads"

"${job[@]}" >"$OUT/job.log" 2>&1 &
jobpid=$!
for _ in $(seq 300); do grep -q "tracing job .*-$jobpid " "$OUT/agent.log" && break; sleep 0.2; done
grep -q "tracing job .*-$jobpid " "$OUT/agent.log" || { echo "job not traced:"; cat "$OUT/agent.log"; exit 1; }
sleep 10  # the tracer's start (hit-cost measurement, first attachments)
job_threads={}
cpu_share "$JOB_S" "$agent" job_threads >/tmp/agent-bench-share.$$
job_cpu=$(cat /tmp/agent-bench-share.$$)
job_rss=$(rss_kb)
# Where the agent's memory is: heap (anonymous), BPF ring buffers and maps, files mapped.
{
  echo "# smaps_rollup"; cat /proc/$agent/smaps_rollup
  echo "# largest mappings by Rss (kB)"
  awk '/^[0-9a-f]+-[0-9a-f]+ / {name = NF >= 6 ? $6 : "[anon]"} /^Rss:/ {rss[name] += $2}
       END {for (n in rss) print rss[n], n}' /proc/$agent/smaps | sort -rn | head -15
} >"$OUT/agent_smaps.txt" 2>&1 || true
job_anon_kb=$(awk '/^RssAnon/ {print $2}' /proc/$agent/status)
# One NVML sampler a node (a job's second sampler and its XID thread cost 1.5 cores on a 4-GPU H200 host).
nvml_threads=$(cat /proc/$agent/task/*/comm 2>/dev/null | grep -c '^ss-nvml$' || true)
xid_threads=$(cat /proc/$agent/task/*/comm 2>/dev/null | grep -c '^ss-nvml-xid$' || true)
job_scrape=$(scrape_ms)
job_series=$(series)
echo "one job: cpu $job_cpu of a core, rss $((job_rss / 1024)) MiB (anonymous $((job_anon_kb / 1024)) MiB), scrape ${job_scrape} ms over $job_series series"
echo "  by thread: $job_threads"
echo "  NVML sampler threads: $nvml_threads, XID threads: $xid_threads (one each expected)"

# An incident: CPU hogs beside the job (as tests/online_detect_cli_test.cpp); time until /metrics shows it open.
incident_s=null
incident_class=null
jobs_traced=$(curl -s "http://127.0.0.1:$port/healthz" | sed -n 's/.*"jobs_traced":\([0-9]*\).*/\1/p')
[ "$jobs_traced" = 1 ] || echo "warning: the agent traced $jobs_traced jobs (other torch processes on this machine): figures are not of one job"
if kill -0 $jobpid 2>/dev/null; then
  # The job's incident counters (by class) before the interference; an incident is a counter that then grows.
  counts() { curl -s "http://127.0.0.1:$port/metrics" | grep -E "^stackscope_incidents_total\{.*job_name=\"[^\"]*-$jobpid\"" |
             sed -n 's/.*class="\([^"]*\)".* \([0-9.e+]*\)$/\1 \2/p' | sort; }
  before=$(counts)
  hogs=()
  onset=$(date +%s.%N)
  for _ in $(seq "$(nproc)"); do timeout 20 sh -c 'while :; do :; done' & hogs+=($!); done
  for _ in $(seq 120); do
    grown=$(join <(echo "$before") <(counts) | awk '$3 > $2 {print $1; exit}')
    if [ -n "$grown" ]; then
      incident_s=$(awk -v a="$onset" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}')
      incident_class="\"$grown\""
      break
    fi
    sleep 0.25
  done
  kill "${hogs[@]}" 2>/dev/null || true
  echo "incident in /metrics: ${incident_s} s after the interference began (class $incident_class)"
fi
kill_tree $jobpid
wait $jobpid 2>/dev/null || true
peak=$(hwm_kb)
kill -TERM $agent
wait $agent || true

# The baseline: the same job under `stackscope record` (the job's tracing alone, no agent), measured the same way.
record_cpu=null
record_rss=null
record_threads=null
if [ -n "$RECORD" ] && [ -x "$RECORD" ]; then
  "$RECORD" record -o "$data/baseline.sdb" -- "${job[@]}" >"$OUT/record.log" 2>&1 &
  rec=$!
  sleep 15  # the job's start-up and the tracer's start, as the agent phase waited for them
  if kill -0 $rec 2>/dev/null; then
    record_threads={}
    cpu_share "$JOB_S" "$rec" record_threads >/tmp/agent-bench-share.$$
    record_cpu=$(cat /tmp/agent-bench-share.$$)
    record_rss=$(($(rss_kb $rec) * 1024))
    echo "record of the same job: cpu $record_cpu of a core, rss $((record_rss / 1048576)) MiB"
    echo "  by thread: $record_threads"
    # The job's processes are the recorder's children and theirs: stopped, the recorder ends with them.
    for c in $(pgrep -P $rec); do kill_tree "$c"; done
  fi
  for _ in $(seq 60); do kill -0 $rec 2>/dev/null || break; sleep 0.5; done
  kill -INT $rec 2>/dev/null || true
  wait $rec 2>/dev/null || true
fi
rm -f /tmp/agent-bench-share.$$
# The job's segments as the agent wrote them (its incidents, the series they were found in): to re-analyse on another
# machine why an incident came early, late or not at all (one can come 19 s after the interference began).
[ -d "$data/jobs" ] && tar -C "$data" -cf - jobs | xz -T0 -6 >"$OUT/agent_job_segments.tar.xz" 2>/dev/null || true
# The NVML samplers' own notes (per-query-group cost of a round, XID and PCIe counter notes) from the node's and the
# job's segments and the baseline recording, before the data directory goes.
if [ -n "$RECORD" ] && [ -x "$RECORD" ]; then
  for f in $(find "$data" -name '*.sdb' | sort); do
    "$RECORD" info --json "$f" 2>/dev/null | python3 -c '
import json, sys
j = json.load(sys.stdin)
for n in j.get("notes", []):
    if n.get("source") == "nvml":
        print(sys.argv[1], "|", n["text"])' "${f#"$data"/}" || true
  done >"$OUT/nvml_notes.txt"
  echo "NVML notes ($OUT/nvml_notes.txt):"; grep -E 'sampling round|XID|PCIe byte' "$OUT/nvml_notes.txt" || true
  # The node's host sampler: which families the idle schedule slows, and each family's CPU a read.
  for f in $(find "$data/node" -name '*.sdb' 2>/dev/null | sort); do
    "$RECORD" info --json "$f" 2>/dev/null | python3 -c '
import json, sys
for n in json.load(sys.stdin).get("notes", []):
    if n.get("source") == "procfs":
        print(sys.argv[1], "|", n["text"])' "${f#"$data"/}" || true
  done >"$OUT/host_notes.txt"
  echo "node host sampler notes ($OUT/host_notes.txt):"; grep -E 'host families|while the node is idle' "$OUT/host_notes.txt" || true
fi
cat >"$OUT/agent_bench.json" <<JSON
{"machine": "$(hostname) $(nproc) cores $(uname -r)", "job": "${job[*]}", "agent_args": "${AGENT_ARGS:-}",
 "idle": {"seconds": $IDLE_S, "cpu_core_fraction": $idle_cpu, "rss_bytes": $((idle_rss * 1024)),
          "scrape_ms_median": $idle_scrape, "series": $idle_series},
 "idle_cpu_by_thread": $idle_threads,
 "one_job": {"seconds": $JOB_S, "cpu_core_fraction": $job_cpu, "rss_bytes": $((job_rss * 1024)),
             "rss_anon_bytes": $((job_anon_kb * 1024)), "scrape_ms_median": $job_scrape, "series": $job_series},
 "one_job_cpu_by_thread": $job_threads,
 "record_baseline": {"cpu_core_fraction": $record_cpu, "rss_bytes": $record_rss, "cpu_by_thread": $record_threads},
 "jobs_traced_during_job_measurement": ${jobs_traced:-null},
 "nvml_threads_during_job": ${nvml_threads:-null}, "xid_threads_during_job": ${xid_threads:-null},
 "incident_visible_after_s": $incident_s, "incident_class": $incident_class, "rss_peak_bytes": $((peak * 1024)),
 "targets": {"idle_cpu": 0.01, "one_job_cpu": 0.02, "rss_bytes": 209715200, "scrape_ms": 50, "incident_s": 5}}
JSON
cat "$OUT/agent_bench.json"
