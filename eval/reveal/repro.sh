#!/usr/bin/env bash
# Reveal case classes reproduced on this machine with `stackscope record` (host layer), then analysed with
# `stackscope analyze --detector reveal --json`. Each case prints the findings that overlap its injection.
# usage: eval/reveal/repro.sh [STACKSCOPE=build/src/cli/stackscope] [case...]
# cases: cpu (busy competitor), memory (allocate and hold, dirty pages), writeback (dd to a file),
#        storage (read bursts), irq (interrupt pressure: loopback packet flood), crosshost (one host of four holds 1 GiB)
# The injection runs from T0 to T0+LEN inside a recording of DUR seconds; on a machine shared with builds the
# baseline is noisy, so longer recordings (DUR=120) separate better than the CI default.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${STACKSCOPE:-$root/build/src/cli/stackscope}
out=${OUT:-$(mktemp -d /tmp/reveal-repro.XXXXXX)}
DUR=${DUR:-60}; T0=${T0:-30}; LEN=${LEN:-6}
cases=("$@"); [ ${#cases[@]} -eq 0 ] && cases=(cpu memory writeback storage irq crosshost)

inject() {  # inject CASE: runs the load for LEN seconds
  case "$1" in
    cpu) for c in $(seq "$(nproc)"); do timeout "$LEN" sh -c 'while :; do :; done' & done; wait ;;
    memory) timeout "$LEN" /usr/bin/python3 -c "import time; b=bytearray(1<<30); [b.__setitem__(i,1) for i in range(0,len(b),4096)]; time.sleep(600)"; true ;;
    writeback) timeout "$LEN" dd if=/dev/zero of="$out/dd.bin" bs=1M count=2048 conv=fsync 2>/dev/null; rm -f "$out/dd.bin" ;;
    storage) dd if=/dev/urandom of="$out/rd.bin" bs=1M count=256 2>/dev/null; sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null
             timeout "$LEN" sh -c "while :; do dd if=$out/rd.bin of=/dev/null bs=1M iflag=direct 2>/dev/null; done"; rm -f "$out/rd.bin" ;;
    irq) timeout "$LEN" /usr/bin/python3 -c "
import socket
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); d=b'x'*1400
while True: s.sendto(d,('127.0.0.1',9))"; true ;;
  esac
}

expect_subsystem() { case "$1" in cpu|irq) echo cpu;; memory|writeback) echo memory;; storage) echo storage;; esac; }

for c in "${cases[@]}"; do
  if [ "$c" = crosshost ]; then
    recs=()
    for h in 0 1 2 3; do
      if [ $h = 2 ]; then (/usr/bin/python3 -c "import time; b=bytearray(1<<30); [b.__setitem__(i,1) for i in range(0,len(b),4096)]; time.sleep(30)" &) ; sleep 3; fi
      "$bin" record -q -d 10 -l host -o "$out/host$h.sdb" 2>/dev/null
      recs+=("$out/host$h.sdb")
    done
    "$bin" analyze --detector reveal --json --no-store "${recs[@]}" > "$out/crosshost.json"
    /usr/bin/python3 - "$out/crosshost.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["reveal"]
odd = [d for d in j["cross_host"] if d["subsystem"] == "memory"]
for d in odd[:5]: print("crosshost:", d["claim"])
print("crosshost:", "FOUND host2 memory" if any("host2" in d["host"] for d in odd) else "NOT FOUND")
PY
    continue
  fi
  ( sleep "$T0"; inject "$c" ) &
  "$bin" record -q -d "$DUR" -l host -o "$out/$c.sdb" 2>/dev/null
  wait
  "$bin" analyze --detector reveal --json --no-store "$out/$c.sdb" > "$out/$c.json"
  /usr/bin/python3 - "$out/$c.json" "$c" "$(expect_subsystem "$c")" "$T0" "$((T0 + LEN))" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["reveal"]; case, want, a, b = sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
hits = [f for f in j["findings"] if f["t_end_s"] > a and f["t_start_s"] < b + 3]
for f in hits: print(f"{case}: [{f['t_start_s']:.0f}s,{f['t_end_s']:.0f}s] {f['summary'][:160]}")
print(f"{case}:", "FOUND" if any(f["subsystem"] == want for f in hits) else "NOT FOUND", f"(want {want} in {a:.0f}-{b:.0f}s)")
PY
done
echo "recordings in $out"
