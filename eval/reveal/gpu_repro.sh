#!/usr/bin/env bash
# Reveal case classes on the GPU machine (root, 16 cores; no stress-ng, tc or ip), in about 5 minutes: ONE
# host+NVML recording of DUR s (default 260) with six injections 25 s apart, each LEN s (default 10) long,
# analysed once; then the cross-host case (four 10 s recordings, the third with 4 GiB held).
#   cpu 100s | memory 125s | writeback 150s | storage 175s | irq 200s | tcp 225s (a 40 MB/s loopback TCP stream
#   runs all along; netfault drops 5% of its segments at ingress for LEN s)
# usage: OUT=/tmp/reveal-gpu eval/reveal/gpu_repro.sh [STACKSCOPE=.carry/stackscope] [NETFAULT=.carry/netfault]
# Leaves in OUT (9 files, each well under 16 MiB): combined.sdb, combined.json, crosshost.json, host0-3.sdb,
# netfault.json and summary.txt. summary.txt has one FOUND / NOT FOUND line a case
# (with the number of findings elsewhere: the detectors are fitted on the first 95 s, before any injection:
# long enough to hold the machine's own periodic activity, which a 35 s warm-up missed).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${STACKSCOPE:-$root/.carry/stackscope}
netfault=${NETFAULT:-$root/.carry/netfault}
py=${PYTHON:-python3}
loads="$root/eval/reveal/loads.py"
out=${OUT:?set OUT to the output folder}; mkdir -p "$out"
# Scratch on the repository's disk: /tmp may be tmpfs, where O_DIRECT reads (storage case) and writeback do nothing.
scratch=${SCRATCH:-$(mktemp -d "$root/.reveal-scratch.XXXXXX")}
DUR=${DUR:-260}; LEN=${LEN:-10}; PORT=${TCP_PORT:-29571}
layers=${LAYERS:-host,nvml}
cases=(cpu memory writeback storage irq tcp)
declare -A at=([cpu]=100 [memory]=125 [writeback]=150 [storage]=175 [irq]=200 [tcp]=225)
declare -A want=([cpu]=cpu [memory]=memory [writeback]=memory [storage]=storage [irq]=cpu [tcp]=network)

inject() {
  case "$1" in
    cpu) for _ in $(seq "$(nproc)"); do timeout "$LEN" sh -c 'while :; do :; done' & done; wait ;;
    memory) "$py" "$loads" memory "$LEN" 4096 ;;
    writeback) "$py" "$loads" dirty "$LEN" 2048 "$scratch" ;;
    storage) timeout "$LEN" sh -c "while :; do dd if=$scratch/rd.bin of=/dev/null bs=1M iflag=direct 2>/dev/null; done" ;;
    irq) for _ in 1 2 3 4; do "$py" "$loads" timers "$LEN" 32 & done; wait ;;
    tcp) "$netfault" --dev lo --ports "$PORT" --drop-percent 5 --duration "$LEN" --json > "$out/netfault.json" ;;
  esac
}

"$netfault" --cleanup >/dev/null 2>&1
dd if=/dev/urandom of="$scratch/rd.bin" bs=1M count=512 2>/dev/null; sync
"$py" "$loads" tcp "$PORT" "$((DUR + 2))" 40 &
stream=$!
for c in "${cases[@]}"; do ( sleep "${at[$c]}"; inject "$c" ) & done
"$bin" record -q -d "$DUR" -l "$layers" -o "$out/combined.sdb" 2> "$scratch/record.err" || cat "$scratch/record.err" >&2
wait
"$bin" analyze --detector reveal --json --no-store --reveal-baseline 95s "$out/combined.sdb" > "$out/combined.json"
{
  for c in "${cases[@]}"; do
    "$py" "$root/eval/reveal/check_findings.py" "$out/combined.json" "$c" "${want[$c]}" "${at[$c]}" "$((${at[$c]} + LEN))"
  done
  # Findings that overlap none of the six injections (each case's line counts the other cases' too).
  "$py" - "$out/combined.json" "$LEN" "${at[@]}" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["reveal"]; n = float(sys.argv[2]); at = [float(a) for a in sys.argv[3:]]
f = [x for x in j["findings"] if not x["summary"].startswith("cross-host")]
out = [x for x in f if not any(x["t_end_s"] > a and x["t_start_s"] < a + n + 3 for a in at)]
print(f"findings: {len(f)}, outside every injection: {len(out)}")
PY
  echo "netfault: $(cat "$out/netfault.json" 2>/dev/null)"
} | tee "$out/summary.txt"

# Cross-host: the same machine recorded four times stands for four hosts; the third holds 4 GiB.
recs=()
for h in 0 1 2 3; do
  # The hog lives exactly through host2's recording (touching 4 GiB takes a few seconds first), not host3's.
  hog=
  if [ $h = 2 ]; then "$py" "$loads" memory 60 4096 & hog=$!; sleep 5; fi
  "$bin" record -q -d 10 -l host -o "$scratch/host$h.sdb" 2>/dev/null
  if [ -n "$hog" ]; then kill "$hog"; wait "$hog" 2>/dev/null; sleep 2; fi
  recs+=("$scratch/host$h.sdb")
done
"$bin" analyze --detector reveal --json --no-store "${recs[@]}" > "$out/crosshost.json"
cp "${recs[@]}" "$out/"
"$py" - "$out/crosshost.json" <<'PY' | tee -a "$out/summary.txt"
import json, sys
j = json.load(open(sys.argv[1]))["reveal"]
odd = [d for d in j["cross_host"] if d["subsystem"] == "memory"]
for r in j.get("cross_host_hosts", []): print("crosshost:", r["claim"])
print("crosshost:", "FOUND host2 memory" if any("host2" in d["host"] for d in odd) else "NOT FOUND",
      "; hosts flagged on memory:", sorted({d["host"] for d in odd}))
PY
rm -rf "$scratch"
ls -la "$out"
