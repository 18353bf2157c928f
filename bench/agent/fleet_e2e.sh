#!/usr/bin/env bash
# The agent's fleet chain on one node, end to end with the real servers: the agent beside a real job, a real
# Prometheus scraping its /metrics every second, a real ClickHouse as its fleet store (deploy/clickhouse/schema.sql);
# CPU hogs start beside the job and the incident must show in /metrics, in Prometheus's query API and in ClickHouse's
# incidents table. Prints how long after the hogs started each one showed it (target <= 5 s in /metrics) and its class.
#
# Usage (root, repo root): OUT=DIR bench/agent/fleet_e2e.sh [JOB_COMMAND...]
#   AGENT       the stackscope-agent binary (default build/src/cli/stackscope-agent)
#   PROMETHEUS  default /usr/bin/prometheus;  CLICKHOUSE  default /usr/sbin/clickhouse-server (Debian's 18.16)
#   FLEET_TAR   a tarball holding prometheus and clickhouse/ (the server and its shared libraries), unpacked first:
#               where neither is installed (the GPU hosts), made here by bench/agent/pack_fleet_servers.sh
#   AGENT_ARGS  more agent flags; JOB_COMMAND default: the bundled CPU workload (Debian's python3-torch).
# GPU host (the working tree, 25 MB, travels with what is carried, 64 MiB in all: carry .carry/fleet alone):
#   here:  mkdir -p .carry/fleet/lib && bench/agent/pack_fleet_servers.sh .carry/fleet/fleet.tar.xz &&
#          strip -o /tmp/a build/src/cli/stackscope-agent && xz -9e -c /tmp/a >.carry/fleet/stackscope-agent.xz &&
#          cp -L /usr/lib/x86_64-linux-gnu/libprometheus-cpp-core.so.1.0 /usr/lib/x86_64-linux-gnu/libcivetweb.so.1 .carry/fleet/lib/
#   there: LD_LIBRARY_PATH=$PWD/.carry/fleet/lib OUT=$OUT FLEET_TAR=.carry/fleet/fleet.tar.xz AGENT=.carry/fleet/stackscope-agent.xz \
#          AGENT_ARGS="--set discovery.command_filter=ddp_job" bench/agent/fleet_e2e.sh \
#          /opt/torch/.venv/bin/torchrun --nproc-per-node 2 eval/stragglers/ddp_job.py --backend nccl --steps 1000000
# Writes $OUT/fleet_e2e.json, the servers' and agent's logs and the job's segments (agent_job_segments.tar.xz).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:?set OUT to a results directory}
AGENT=${AGENT:-build/src/cli/stackscope-agent}
PROMETHEUS=${PROMETHEUS:-/usr/bin/prometheus}
CLICKHOUSE=${CLICKHOUSE:-/usr/sbin/clickhouse-server}
CH_LIBS=""
mkdir -p "$OUT"
work=$(mktemp -d /tmp/fleet-e2e-XXXXXX)
if [ -n "${FLEET_TAR:-}" ]; then
  tar -C "$work" -xJf "$FLEET_TAR"
  PROMETHEUS=$work/prometheus CLICKHOUSE=$work/clickhouse/clickhouse-server CH_LIBS=$work/clickhouse
fi
if [[ $AGENT == *.xz ]]; then  # carried compressed (a device call carries 64 MiB with the working tree)
  xz -dc "$AGENT" >"$work/stackscope-agent" && chmod +x "$work/stackscope-agent" && AGENT=$work/stackscope-agent
fi
for b in "$AGENT" "$PROMETHEUS" "$CLICKHOUSE"; do [ -x "$b" ] || { echo "fleet_e2e.sh: $b is not an executable"; exit 2; }; done
job=("$@")
[ ${#job[@]} -gt 0 ] || job=(/usr/bin/python3 workloads/cpu_train.py --seconds 150)
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
pids=()
tree() { local c; for c in $(pgrep -P "$1"); do tree "$c"; done; echo "$1"; }
cleanup() {
  [ -z "${jobpid:-}" ] || kill $(tree "$jobpid") 2>/dev/null || true
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  # The job's segments as the agent wrote them (its incidents, the series they were found in): to re-analyse
  # elsewhere why an incident came late or not at all (without them a GPU run that shows none cannot be looked into).
  if [ -d "$work/agent/jobs" ]; then tar -C "$work/agent" -cf - jobs | xz -T0 -6 >"$OUT/agent_job_segments.tar.xz" || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# ClickHouse on loopback, its own configuration and data (as tests/agent/clickhouse_server.h starts it).
ch_port=$(free_port)
ch=$work/ch; mkdir -p "$ch/data"
cat >"$ch/config.xml" <<XML
<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><log>$ch/server.log</log><errorlog>$ch/server.err.log</errorlog><console>0</console></logger>
  <http_port>$ch_port</http_port>
  <listen_host>127.0.0.1</listen_host>
  <path>$ch/data/</path><tmp_path>$ch/data/tmp/</tmp_path>
  <user_files_path>$ch/data/user_files/</user_files_path><format_schema_path>$ch/data/format_schemas/</format_schema_path>
  <mark_cache_size>67108864</mark_cache_size><uncompressed_cache_size>67108864</uncompressed_cache_size>
  <users_config>$ch/users.xml</users_config>
  <default_profile>default</default_profile><default_database>default</default_database>
</yandex>
XML
cat >"$ch/users.xml" <<XML
<?xml version="1.0"?>
<yandex>
  <profiles><default><max_memory_usage>4000000000</max_memory_usage></default></profiles>
  <users><default><password></password><networks><ip>127.0.0.1</ip></networks><profile>default</profile><quota>default</quota></default></users>
  <quotas><default></default></quotas>
</yandex>
XML
LD_LIBRARY_PATH=$CH_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$CLICKHOUSE" --config-file="$ch/config.xml" >"$OUT/clickhouse.out" 2>&1 &
pids+=($!)
ch_url=http://127.0.0.1:$ch_port
for _ in $(seq 200); do [ "$(curl -s --max-time 2 "$ch_url/ping" || true)" = "Ok." ] && break; sleep 0.2; done
[ "$(curl -s --max-time 2 "$ch_url/ping" || true)" = "Ok." ] || { echo "ClickHouse did not start:"; cat "$OUT/clickhouse.out" "$ch/server.err.log" 2>/dev/null | tail -20; exit 1; }
chq() { curl -sS --fail-with-body --max-time 30 --data-binary "$1" "$ch_url/${2:+?database=$2}"; }
chq "CREATE DATABASE IF NOT EXISTS stackscope" >/dev/null
# The schema, one statement a request (comments dropped), as the agent's operators apply it.
sed 's/--.*$//' deploy/clickhouse/schema.sql | tr '\n' ' ' | tr ';' '\n' | while read -r stmt; do
  [ -z "${stmt// /}" ] || chq "$stmt" stackscope >/dev/null
done

# The agent, its fleet store the ClickHouse above; batches cut every second.
data=$work/agent
# shellcheck disable=SC2086
"$AGENT" agent --data-dir "$data" --listen 127.0.0.1:0 --set clickhouse.url="$ch_url" --set clickhouse.database=stackscope \
  --set clickhouse.batch_interval=1s ${AGENT_ARGS:-} >"$OUT/agent.log" 2>&1 &
agent=$!; pids+=($agent)
port=""
for _ in $(seq 100); do
  port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$OUT/agent.log" | head -1)
  [ -n "$port" ] && break; sleep 0.2
done
[ -n "$port" ] || { echo "agent did not start:"; cat "$OUT/agent.log"; exit 1; }

# Prometheus scraping the agent every second.
prom_port=$(free_port)
cat >"$work/prometheus.yml" <<YML
global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: stackscope
    static_configs:
      - targets: ['127.0.0.1:$port']
YML
"$PROMETHEUS" --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address=127.0.0.1:$prom_port >"$OUT/prometheus.log" 2>&1 &
pids+=($!)
promq() { curl -s -G --max-time 5 "http://127.0.0.1:$prom_port/api/v1/query" --data-urlencode "query=$1"; }
for _ in $(seq 150); do promq 'up{job="stackscope"}' | grep -q '"1"\]' && break; sleep 0.2; done
promq 'up{job="stackscope"}' | grep -q '"1"\]' || { echo "Prometheus does not scrape the agent:"; tail -20 "$OUT/prometheus.log"; exit 1; }

"${job[@]}" >"$OUT/job.log" 2>&1 &
jobpid=$!
for _ in $(seq 300); do grep -q "tracing job .*-$jobpid " "$OUT/agent.log" && break; sleep 0.2; done
grep -q "tracing job .*-$jobpid " "$OUT/agent.log" || { echo "job not traced:"; cat "$OUT/agent.log"; exit 1; }
name=$(sed -n "s/.*tracing job \([^ ]*-$jobpid\) .*/\1/p" "$OUT/agent.log" | head -1)
sleep 20  # the job's start-up and the tracer's (its start-up is a phase, not an incident)

# Incidents before the hogs, in each place; an incident is a count that then grows.
metrics_count() { curl -s "http://127.0.0.1:$port/metrics" | grep -E "^stackscope_incidents_total\{.*job_name=\"$name\"" |
                  awk '{s += $NF} END {print s + 0}'; }
prom_count() { promq "sum(stackscope_incidents_total{job_name=\"$name\"})" |
               python3 -c 'import json,sys; r = json.load(sys.stdin)["data"]["result"]; print(float(r[0]["value"][1]) if r else 0)'; }
ch_count() { chq "SELECT count() FROM incidents WHERE job = '$name' AND state = 'open'" stackscope 2>/dev/null || echo 0; }
m0=$(metrics_count); p0=$(prom_count); c0=$(ch_count)
hogs=()
onset=$(date +%s.%N)
for _ in $(seq "$(nproc)"); do timeout 25 sh -c 'while :; do :; done' & hogs+=($!); done
t_metrics=null t_prom=null t_ch=null
since() { awk -v a="$onset" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}'; }
for _ in $(seq 240); do
  [ "$t_metrics" != null ] || { awk -v a="$(metrics_count)" -v b="$m0" 'BEGIN {exit !(a > b)}' && t_metrics=$(since); }
  [ "$t_prom" != null ] || { awk -v a="$(prom_count)" -v b="$p0" 'BEGIN {exit !(a > b)}' && t_prom=$(since); }
  [ "$t_ch" != null ] || { awk -v a="$(ch_count)" -v b="$c0" 'BEGIN {exit !(a > b)}' && t_ch=$(since); }
  [ "$t_metrics" != null ] && [ "$t_prom" != null ] && [ "$t_ch" != null ] && break
  sleep 0.25
done
kill "${hogs[@]}" 2>/dev/null || true
sleep 3
ch_rows=$(chq "SELECT incident_id, state, class FROM incidents WHERE job = '$name' ORDER BY ts_ns FORMAT JSONEachRow" stackscope || true)
echo "$ch_rows" >"$OUT/clickhouse_incidents.jsonl"
class=$(echo "$ch_rows" | python3 -c 'import json,sys
rows = [json.loads(l) for l in sys.stdin if l.strip()]
named = [r["class"] for r in rows if r["class"] not in ("", "unexplained")]
print(json.dumps(named[-1] if named else (rows[-1]["class"] if rows else None)))')
samples=$(chq "SELECT count() FROM samples" stackscope || echo null)
aggregates=$(chq "SELECT count() FROM event_aggregates WHERE job = '$name'" stackscope || echo null)
echo "incident after the hogs began: /metrics ${t_metrics} s, Prometheus ${t_prom} s, ClickHouse ${t_ch} s; class $class"
echo "ClickHouse: $samples host samples, $aggregates event aggregates of the job; incident rows in $OUT/clickhouse_incidents.jsonl"
cat >"$OUT/fleet_e2e.json" <<JSON
{"machine": "$(hostname) $(nproc) cores $(uname -r)", "job": "${job[*]}", "job_name": "$name",
 "incident_after_s": {"metrics": $t_metrics, "prometheus": $t_prom, "clickhouse": $t_ch}, "class": $class,
 "clickhouse_samples": ${samples:-null}, "clickhouse_job_event_aggregates": ${aggregates:-null}, "targets": {"metrics_s": 5}}
JSON
