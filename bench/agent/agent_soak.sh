#!/usr/bin/env bash
# The agent's soak, as a bench (CI runs the 30-job version: AgentDaemon.SurvivesThirtyShortJobsWithBoundedMemory):
# one agent for SOAK_S seconds while short torch jobs (Debian's python3-torch, `import torch; sleep JOB_SLEEP`) start
# in waves of WAVE every GAP seconds and end; before each wave, once it traces nothing, the agent's RSS, anonymous
# RSS, descriptors and threads are sampled. At the end: how many of the jobs it traced and saw end, whether it said
# "cannot trace", and the memory and descriptors of the first and the last tenth of the run.
#
# Usage (root, repo root): OUT=/tmp/soak SOAK_S=3600 bench/agent/agent_soak.sh
#   AGENT (default build/src/cli/stackscope-agent), WAVE (3), GAP (30), JOB_SLEEP (3), SOAK_S (3600)
# Writes $OUT/soak.csv (t_s, jobs started, rss_kib, anon_kib, fds, threads, jobs_traced), $OUT/agent.log,
# $OUT/summary.txt (descriptors: all but the process sampler's /proc/PID files of live processes); exit 1 when a job
# was not traced or not seen to end, or memory or descriptors grew.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:?set OUT to a results directory}
AGENT=${AGENT:-build/src/cli/stackscope-agent}
SOAK_S=${SOAK_S:-3600}; WAVE=${WAVE:-3}; GAP=${GAP:-30}; JOB_SLEEP=${JOB_SLEEP:-3}
mkdir -p "$OUT"
data=$(mktemp -d /tmp/agent-soak-XXXXXX)
tag=$data  # the jobs' command lines carry it: the agent traces only these
"$AGENT" agent --data-dir "$data" --listen 127.0.0.1:0 --set discovery.scan_interval=300ms \
  --set "discovery.command_filter=$tag" >"$OUT/agent.log" 2>&1 &
agent=$!
trap 'kill $agent 2>/dev/null || true; rm -rf "$data"' EXIT
port=""
for _ in $(seq 100); do
  port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$OUT/agent.log" | head -1)
  [ -n "$port" ] && break
  sleep 0.2
done
[ -n "$port" ] || { echo "agent did not start:"; cat "$OUT/agent.log"; exit 1; }
traced_now() { curl -s "http://127.0.0.1:$port/healthz" | python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs_traced"])'; }
echo "t_s,jobs_started,rss_kib,anon_kib,fds,threads,jobs_traced" > "$OUT/soak.csv"
t0=$(date +%s); started=0; pids=()
while (( $(date +%s) - t0 < SOAK_S )); do
  wave_at=$(date +%s)
  # Sampled before each wave, once the last wave's jobs ended (a job's tracer frees its buffers when it ends).
  if (( started > 0 )); then
    for _ in $(seq 40); do [[ $(traced_now) == 0 ]] && break; sleep 0.5; done
    rss=$(awk '/^VmRSS/ {print $2}' /proc/$agent/status); anon=$(awk '/^RssAnon/ {print $2}' /proc/$agent/status)
    # Descriptors other than the process sampler's /proc/PID files (those follow the machine's processes), plus
    # any of those whose process is gone (a leak).
    fds=0
    for f in /proc/$agent/fd/*; do
      tgt=$(readlink "$f" 2>/dev/null) || continue
      if [[ $tgt =~ ^/proc/([0-9]+)/ ]]; then [[ -e /proc/${BASH_REMATCH[1]} ]] || fds=$((fds + 1)); else fds=$((fds + 1)); fi
    done
    thr=$(ls /proc/$agent/task | wc -l)
    echo "$(( $(date +%s) - t0 )),$started,$rss,$anon,$fds,$thr,$(traced_now)" >> "$OUT/soak.csv"
  fi
  for _ in $(seq "$WAVE"); do
    /usr/bin/python3 -c "import torch, time; time.sleep($JOB_SLEEP)" "$tag" >/dev/null 2>&1 &
    pids+=($!); started=$((started + 1))
  done
  while (( $(date +%s) < wave_at + GAP )); do sleep 1; done
done
for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
sleep 5
traced=$(grep -c "tracing job python3-" "$OUT/agent.log" || true)
ended=$(grep -c "job python3-[0-9]* ended" "$OUT/agent.log" || true)
cannot=$(grep -c "cannot trace" "$OUT/agent.log" || true)
rc=0
python3 - "$OUT/soak.csv" "$started" "$traced" "$ended" "$cannot" "$SOAK_S" > "$OUT/summary.txt" <<'PY' || rc=$?
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
started, traced, ended, cannot, soak = (int(x) for x in sys.argv[2:7])
n = max(1, len(rows) // 10)
first, last = rows[1:1 + n] or rows[:n], rows[-n:]
def med(rs, k):
    v = sorted(int(r[k]) for r in rs)
    return v[len(v) // 2] if v else 0
ok = traced == started and ended == started and cannot == 0
grow_rss = med(last, "anon_kib") - med(first, "anon_kib")
grow_fds = med(last, "fds") - med(first, "fds")
ok = ok and grow_rss < 40 * 1024 and grow_fds <= 3 and max(int(r["rss_kib"]) for r in rows) < 200 * 1024
print(f"soak {soak} s: {started} short jobs started, {traced} traced, {ended} seen to end, 'cannot trace' {cannot}")
print(f"RSS (idle, between waves) first tenth {med(first, 'rss_kib') / 1024:.0f} MiB, last tenth "
      f"{med(last, 'rss_kib') / 1024:.0f} MiB, max {max(int(r['rss_kib']) for r in rows) / 1024:.0f} MiB; anonymous "
      f"{med(first, 'anon_kib') / 1024:.0f} -> {med(last, 'anon_kib') / 1024:.0f} MiB")
print(f"descriptors {med(first, 'fds')} -> {med(last, 'fds')}; threads {med(first, 'threads')} -> {med(last, 'threads')}")
print("verdict:", "bounded, every job traced and ended" if ok else "NOT OK")
sys.exit(0 if ok else 1)
PY
cat "$OUT/summary.txt"
exit $rc
