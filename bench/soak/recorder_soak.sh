#!/usr/bin/env bash
# The recorder's memory over a long host-only recording: runs `stackscope record --layers host`
# for SECONDS, samples its resident memory every STEP seconds, and reports the growth rate (least-squares slope)
# over the whole run and over its second half (the first minutes hold one-off growth: SQLite's page cache filling,
# the series table of the processes alive at the start).
#
# Usage: bench/soak/recorder_soak.sh STACKSCOPE_BIN OUT_DIR [SECONDS=3600] [STEP=10] [RECORD_ARGS...]
# Writes OUT_DIR/rss.csv (elapsed_s,rss_kb,anon_kb,recording_bytes), OUT_DIR/soak.sdb and
# OUT_DIR/summary.txt; prints the summary. Exit 0 when the run completed (the verdict is the figure, not the code).
set -euo pipefail
bin=${1:?usage: recorder_soak.sh STACKSCOPE_BIN OUT_DIR [SECONDS] [STEP] [RECORD_ARGS...]}
out=${2:?usage: recorder_soak.sh STACKSCOPE_BIN OUT_DIR [SECONDS] [STEP] [RECORD_ARGS...]}
seconds=${3:-3600}
step=${4:-10}
shift $(( $# < 4 ? $# : 4 ))
mkdir -p "$out"
rec="$out/soak.sdb"
rm -f "$rec" "$rec-wal" "$rec-shm"
"$bin" record -q --layers host -d "$seconds" -o "$rec" "$@" &
pid=$!
trap 'kill -INT $pid 2>/dev/null || true' INT TERM
echo "elapsed_s,rss_kb,anon_kb,recording_bytes" >"$out/rss.csv"
t0=$(date +%s.%N)
while kill -0 "$pid" 2>/dev/null; do
  status=$(cat "/proc/$pid/status" 2>/dev/null) || break
  rss=$(awk '/^VmRSS:/ {print $2}' <<<"$status")
  anon=$(awk '/^RssAnon:/ {print $2}' <<<"$status")
  [ -n "$rss" ] || break
  bytes=$(( $(stat -c %s "$rec" 2>/dev/null || echo 0) + $(stat -c %s "$rec-wal" 2>/dev/null || echo 0) ))
  now=$(date +%s.%N)
  echo "$(awk -v a="$now" -v b="$t0" 'BEGIN {printf "%.1f", a - b}'),$rss,$anon,$bytes" >>"$out/rss.csv"
  sleep "$step"
done
rc=0
wait "$pid" || rc=$?
# Least-squares slope (KB per second) of column $2 (2: RSS, 3: anonymous RSS) over [$1, end] of the run.
slope() {
  awk -F, -v from="$1" -v c="$2" 'NR > 1 && $1 >= from {n++; sx += $1; sy += $c; sxx += $1 * $1; sxy += $1 * $c}
    END {if (n < 3) {print "nan"; exit} printf "%.3f", (n * sxy - sx * sy) / (n * sxx - sx * sx)}' "$out/rss.csv"
}
last=$(tail -n 1 "$out/rss.csv" | cut -d, -f1)
half=$(awk -v l="$last" 'BEGIN {printf "%.1f", l / 2}')
{
  echo "recorder soak: $bin record --layers host -d $seconds $*  (exit $rc)"
  echo "samples: $(( $(wc -l <"$out/rss.csv") - 1 )) every ${step} s over ${last} s"
  awk -F, 'NR == 2 {f = $2} NR > 1 {if ($2 > m) m = $2; l = $2; a = $3} END {
    printf "rss first %d KB, last %d KB, peak %d KB (anon at end %d KB)\n", f, l, m, a}' "$out/rss.csv"
  awk -F, -v h="$half" 'NR > 1 && $1 >= h && !s {s = $2} NR > 1 {l = $2} END {
    printf "rss second half: %d KB -> %d KB\n", s, l}' "$out/rss.csv"
  echo "rss slope: whole run $(slope 0 2) KB/s, second half $(slope "$half" 2) KB/s"
  echo "anon slope (heap: what a leak grows): whole run $(slope 0 3) KB/s, second half $(slope "$half" 3) KB/s"
  echo "recording: $(tail -n 1 "$out/rss.csv" | cut -d, -f4) bytes (.sdb + -wal at the last sample)"
} | tee "$out/summary.txt"
