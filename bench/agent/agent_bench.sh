#!/usr/bin/env bash
# Issue 16's agent targets, measured on the machine it runs on: the agent's CPU on an idle node (<= 1 % of a core)
# and beside one traced job (<= 2 %, the agent process only: the probes' own cost lands in the job and is
# measured by eval/tracing), its RSS (<= 200 MB), the time of a /metrics scrape over HTTP (<= 50 ms) and how many
# series it carried, and how long after an injected CPU interference the incident shows in /metrics (<= 5 s).
#
# Usage (root, repo root): OUT=/tmp/agent-bench bench/agent/agent_bench.sh [JOB_COMMAND...]
#   AGENT: the stackscope-agent binary (default build/src/cli/stackscope-agent)
#   IDLE_S, JOB_S: seconds of each measurement (default 60 and 60)
#   AGENT_ARGS: more agent flags, e.g. "--set trace.interval=500ms"
#   JOB_COMMAND: the traced job (default: the bundled CPU workload, Debian's python3-torch). On a GPU machine:
#     OUT=$OUT bench/agent/agent_bench.sh python3 eval/stragglers/ddp_job.py --steps 100000
#   The in-process exposition of 8 GPUs x 700 series: build/bench/agent/agent_scrape_bench.
# Writes $OUT/agent_bench.json (and the agent's log); prints the figures.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:?set OUT to a results directory}
AGENT=${AGENT:-build/src/cli/stackscope-agent}
IDLE_S=${IDLE_S:-60}
JOB_S=${JOB_S:-60}
mkdir -p "$OUT"
data=$(mktemp -d /tmp/agent-bench-XXXXXX)
job=("$@")
[ ${#job[@]} -gt 0 ] || job=(/usr/bin/python3 workloads/cpu_train.py --seconds $((JOB_S + 40)))

# shellcheck disable=SC2086
"$AGENT" agent --data-dir "$data" --listen 127.0.0.1:0 ${AGENT_ARGS:-} >"$OUT/agent.log" 2>&1 &
agent=$!
trap 'kill $agent 2>/dev/null || true; rm -rf "$data"' EXIT
port=""
for _ in $(seq 100); do
  port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$OUT/agent.log" | head -1)
  [ -n "$port" ] && break
  sleep 0.2
done
[ -n "$port" ] || { echo "agent did not start:"; cat "$OUT/agent.log"; exit 1; }
hz=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' /proc/$agent/stat; }
rss_kb() { awk '/^VmRSS/ {print $2}' /proc/$agent/status; }
hwm_kb() { awk '/^VmHWM/ {print $2}' /proc/$agent/status; }
# CPU share of one core over $1 seconds.
cpu_share() {
  local t0 c0 t1 c1
  t0=$(date +%s.%N); c0=$(cpu_ticks); sleep "$1"; t1=$(date +%s.%N); c1=$(cpu_ticks)
  awk -v c0="$c0" -v c1="$c1" -v t0="$t0" -v t1="$t1" -v hz="$hz" 'BEGIN {printf "%.4f", (c1 - c0) / hz / (t1 - t0)}'
}
scrape_ms() {  # median of 20 scrapes, milliseconds
  for _ in $(seq 20); do curl -s -o /dev/null -w '%{time_total}\n' "http://127.0.0.1:$port/metrics"; done |
    sort -n | awk '{a[NR] = $1} END {printf "%.2f", a[int((NR + 1) / 2)] * 1000}'
}
series() { curl -s "http://127.0.0.1:$port/metrics" | grep -vc '^#'; }

sleep 5  # start-up (the node samplers' first passes)
idle_cpu=$(cpu_share "$IDLE_S")
idle_rss=$(rss_kb)
idle_scrape=$(scrape_ms)
idle_series=$(series)
echo "idle: cpu $idle_cpu of a core, rss $((idle_rss / 1024)) MiB, scrape ${idle_scrape} ms over $idle_series series"

"${job[@]}" >"$OUT/job.log" 2>&1 &
jobpid=$!
for _ in $(seq 300); do grep -q "tracing job .*-$jobpid " "$OUT/agent.log" && break; sleep 0.2; done
grep -q "tracing job .*-$jobpid " "$OUT/agent.log" || { echo "job not traced:"; cat "$OUT/agent.log"; exit 1; }
sleep 10  # the tracer's start (hit-cost measurement, first attachments)
job_cpu=$(cpu_share "$JOB_S")
job_rss=$(rss_kb)
job_scrape=$(scrape_ms)
job_series=$(series)
echo "one job: cpu $job_cpu of a core, rss $((job_rss / 1024)) MiB, scrape ${job_scrape} ms over $job_series series"

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
kill $jobpid 2>/dev/null || true
wait $jobpid 2>/dev/null || true
peak=$(hwm_kb)
kill -TERM $agent
wait $agent || true
cat >"$OUT/agent_bench.json" <<JSON
{"machine": "$(hostname) $(nproc) cores $(uname -r)", "job": "${job[*]}", "agent_args": "${AGENT_ARGS:-}",
 "idle": {"seconds": $IDLE_S, "cpu_core_fraction": $idle_cpu, "rss_bytes": $((idle_rss * 1024)),
          "scrape_ms_median": $idle_scrape, "series": $idle_series},
 "one_job": {"seconds": $JOB_S, "cpu_core_fraction": $job_cpu, "rss_bytes": $((job_rss * 1024)),
             "scrape_ms_median": $job_scrape, "series": $job_series},
 "jobs_traced_during_job_measurement": ${jobs_traced:-null},
 "incident_visible_after_s": $incident_s, "incident_class": $incident_class, "rss_peak_bytes": $((peak * 1024)),
 "targets": {"idle_cpu": 0.01, "one_job_cpu": 0.02, "rss_bytes": 209715200, "scrape_ms": 50, "incident_s": 5}}
JSON
cat "$OUT/agent_bench.json"
