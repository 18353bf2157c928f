#!/usr/bin/env bash
# Where a tracer's memory is: `stackscope record -o X -- CMD...` of a job, the recorder's RSS (anonymous, file-backed)
# read from /proc/PID/smaps_rollup every 2 s, and its largest mappings at the end (the agent's RSS target, 200 MB:
# the agent's per-job tracer is the same pipeline; VmHWM: the peak, parsing included). Writes $OUT/record_rss.txt;
# prints the last and the peak figures.
# Run (repo root, root): OUT=/tmp/rss SECONDS_RUN=40 bash bench/agent/record_rss.sh /usr/bin/python3 workloads/cpu_train.py
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:?set OUT}
RECORD=${RECORD:-build/src/cli/stackscope}
RUN_S=${SECONDS_RUN:-40}
mkdir -p "$OUT"
rm -f "$OUT/record_rss.sdb"
"$RECORD" record -o "$OUT/record_rss.sdb" -- "$@" --seconds "$RUN_S" >"$OUT/record.log" 2>&1 &
rec=$!
kb() { awk -v k="$1:" '$1 == k {print $2}' /proc/$rec/smaps_rollup 2>/dev/null; }
peak=0
{
  echo "# t_s rss_kB anon_kB file_kB vmhwm_kB (recorder pid $rec: $RECORD record -- $*)"
  for ((t = 2; t <= RUN_S + 10; t += 2)); do
    sleep 2
    kill -0 $rec 2>/dev/null || break
    rss=$(kb Rss) anon=$(kb Anonymous)
    [ -n "$rss" ] || break
    hwm=$(awk '$1 == "VmHWM:" {print $2}' /proc/$rec/status 2>/dev/null)
    echo "$t $rss $anon $((rss - anon)) $hwm"
    ((rss > peak)) && peak=$rss
    if ((t == RUN_S - 4)); then  # late in the run, libraries attached: where the memory is
      cp /proc/$rec/smaps_rollup "$OUT/smaps_rollup.txt"
      awk '/^[0-9a-f]+-[0-9a-f]+ /{n = (NF >= 6 ? $6 : "[anon]")} /^Rss:/{rss[n] += $2}
           END {for (n in rss) print rss[n], n}' /proc/$rec/smaps | sort -rn | head -15 >"$OUT/largest_mappings.txt"
    fi
  done
} >"$OUT/record_rss.txt"
wait $rec || true
echo "peak_rss_kB $peak" >>"$OUT/record_rss.txt"
tail -n 4 "$OUT/record_rss.txt"
echo "# largest mappings late in the run (kB)"; cat "$OUT/largest_mappings.txt" 2>/dev/null || true
