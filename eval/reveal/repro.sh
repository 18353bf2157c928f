#!/usr/bin/env bash
# Reveal case classes reproduced on this machine with `stackscope record` (host layer), then analysed with
# `stackscope analyze --detector reveal --json`. Each case prints the findings that overlap its injection and
# FOUND when one of them names the expected subsystem.
# usage: [STACKSCOPE=build/src/cli/stackscope] [NETFAULT=build/eval/netfault/netfault] [OUT=dir]
#        [DUR=90] [T0=50] [LEN=10] eval/reveal/repro.sh [case...]
# cases: cpu (busy loops on every core), memory (allocate and hold 1 GiB), writeback (1 GiB of buffered writes
#        over 80% of LEN, then fsync: dirty pages pile up, then are written back), storage (direct-I/O read bursts), irq (interrupt pressure without a
#        device: 2 x 32 threads arming 20 us sleeps -> local timer interrupts, ~10x the idle rate),
#        tcp (a steady 40 MB/s loopback TCP stream all along; netfault drops 5% of its segments at ingress
#        from T0 for LEN s -> TCP retransmissions), crosshost (one host of four holds HOG_MIB, default 4 GiB)
# Recordings are DUR s long with the injection at T0..T0+LEN. Each is analysed twice: fitted on the whole run
# (Reveal's default; the 99th-percentile thresholds assume ~1% anomalous windows, and a 10 s injection is ~14%
# of 88 windows) and fitted on the clean warm-up before T0 (--reveal-baseline T0-5 s).
# ANALYZE_ONLY=1 re-analyses the recordings already in OUT.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${STACKSCOPE:-$root/build/src/cli/stackscope}
netfault=${NETFAULT:-$root/build/eval/netfault/netfault}
py=${PYTHON:-/usr/bin/python3}; [ -x "$py" ] || py=python3
loads="$root/eval/reveal/loads.py"
out=${OUT:-$(mktemp -d /tmp/reveal-repro.XXXXXX)}; mkdir -p "$out"
DUR=${DUR:-90}; T0=${T0:-50}; LEN=${LEN:-10}
TCP_PORT=${TCP_PORT:-29571}
HOG_MIB=${HOG_MIB:-4096}  # crosshost: what host2 holds
cases=("$@"); [ ${#cases[@]} -eq 0 ] && cases=(cpu memory writeback storage irq tcp crosshost)

inject() {  # inject CASE: runs the load for LEN seconds
  case "$1" in
    cpu) for _ in $(seq "$(nproc)"); do timeout "$LEN" sh -c 'while :; do :; done' & done; wait ;;
    memory) "$py" "$loads" memory "$LEN" 1024 ;;
    writeback) "$py" "$loads" dirty "$LEN" 1024 "$out" ;;
    storage) timeout "$LEN" sh -c "while :; do dd if=$out/rd.bin of=/dev/null bs=1M iflag=direct 2>/dev/null; done" ;;
    irq) "$py" "$loads" timers "$LEN" 32 & "$py" "$loads" timers "$LEN" 32; wait ;;
    tcp) "$netfault" --dev lo --ports "$TCP_PORT" --drop-percent 5 --duration "$LEN" --json > "$out/netfault.json" ;;
  esac
}
prepare() {  # before the recording starts
  case "$1" in
    storage) dd if=/dev/urandom of="$out/rd.bin" bs=1M count=256 2>/dev/null; sync ;;
    tcp) "$py" "$loads" tcp "$TCP_PORT" "$((DUR + 2))" 40 & ;;
  esac
}
cleanup() { rm -f "$out/rd.bin"; }

expect_subsystem() { case "$1" in cpu|irq) echo cpu;; memory|writeback) echo memory;; storage) echo storage;; tcp) echo network;; esac; }

for c in "${cases[@]}"; do
  if [ "$c" = crosshost ]; then
    recs=()
    for h in 0 1 2 3; do
      if [ -z "${ANALYZE_ONLY:-}" ]; then
        # The hog lives exactly through host2's recording (touching HOG_MIB takes a few seconds first), so
        # host3 is recorded without it.
        hog=
        if [ $h = 2 ]; then "$py" "$loads" memory 60 "$HOG_MIB" & hog=$!; sleep 5; fi
        "$bin" record -q --force -d 10 -l host -o "$out/host$h.sdb" 2>/dev/null
        if [ -n "$hog" ]; then kill "$hog"; wait "$hog" 2>/dev/null; sleep 2; fi
      fi
      recs+=("$out/host$h.sdb")
    done
    "$bin" analyze --detector reveal --json --no-store "${recs[@]}" > "$out/crosshost.json"
    "$py" - "$out/crosshost.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["reveal"]
odd = [d for d in j["cross_host"] if d["subsystem"] == "memory"]
for r in j.get("cross_host_hosts", []): print("crosshost:", r["claim"])
print("crosshost:", "FOUND host2 memory" if any("host2" in d["host"] for d in odd) else "NOT FOUND",
      "; hosts flagged on memory:", sorted({d["host"] for d in odd}))
PY
    continue
  fi
  if [ -z "${ANALYZE_ONLY:-}" ]; then
    prepare "$c"
    ( sleep "$T0"; inject "$c" ) &
    injector=$!
    "$bin" record -q --force -d "$DUR" -l host -o "$out/$c.sdb" 2>/dev/null
    wait "$injector"; wait
    cleanup
  fi
  [ "$c" = tcp ] && [ -s "$out/netfault.json" ] && echo "tcp: netfault $(cat "$out/netfault.json")"
  # Two fits: on every window (Reveal's unsupervised default) and on the clean warm-up before the injection.
  "$bin" analyze --detector reveal --json --no-store "$out/$c.sdb" > "$out/$c.json"
  echo "$c, fitted on the whole run:"
  "$py" "$root/eval/reveal/check_findings.py" "$out/$c.json" "$c" "$(expect_subsystem "$c")" "$T0" "$((T0 + LEN))"
  "$bin" analyze --detector reveal --json --no-store --reveal-baseline "$((T0 - 5))s" "$out/$c.sdb" > "$out/$c-warmup.json"
  echo "$c, fitted on the first $((T0 - 5)) s (clean warm-up):"
  "$py" "$root/eval/reveal/check_findings.py" "$out/$c-warmup.json" "$c" "$(expect_subsystem "$c")" "$T0" "$((T0 + LEN))"
done
echo "recordings in $out"
