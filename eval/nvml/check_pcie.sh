#!/usr/bin/env bash
# PCIe rates of stackscope's NVML sampler against nvidia-smi's, under a host-to-device copy storm on GPU 0
# (pinned 256 MiB buffers copied for the whole run): the sampler reads the PCIe byte counters
# (NVML fields 197/198) where the driver has them, instead of nvmlDeviceGetPcieThroughput (20 ms a call), which
# `nvidia-smi dmon -s t` still uses. Also prints the sampler's notes: which source it used and the time each
# sampling round took, by query group.
#   OUT=DIR eval/nvml/check_pcie.sh [path/to/stackscope]   (a GPU machine; torch with CUDA; about 25 s)
set -euo pipefail
BIN=${1:-.carry/stackscope}
OUT=${OUT:-/tmp/pcie-check}
N=${SECONDS_TO_SAMPLE:-15}
mkdir -p "$OUT"
PY=${PYTHON:-/opt/torch/.venv/bin/python3}
"$PY" - "$((N + 4))" > "$OUT/storm.txt" 2>&1 <<'PYEOF' &
import sys, time, torch
end = time.time() + float(sys.argv[1])
src = torch.empty(256 << 20, dtype=torch.uint8).pin_memory()
dst = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
n = 0
t0 = time.time()
while time.time() < end:
    dst.copy_(src)
    torch.cuda.synchronize()
    n += 1
print(f"host to device: {n * 256 / (time.time() - t0):.0f} MiB/s")
PYEOF
storm=$!
sleep 3
nvidia-smi dmon -i 0 -s t -d 1 -c "$N" > "$OUT/dmon.txt" 2>&1 &
dmon=$!
"$BIN" nvml --duration "$N" --interval-ms 100 -o "$OUT/nvml.sdb" > "$OUT/nvml.txt" 2>&1
wait "$dmon" || true
wait "$storm" || true
"$BIN" export "$OUT/nvml.sdb" --format csv --what samples -q -o "$OUT/ours.csv"
"$BIN" info "$OUT/nvml.sdb" > "$OUT/info.txt" 2>&1 || true
python3 - "$OUT" <<'PYEOF'
import csv, statistics, sys, os
out = sys.argv[1]
ours = {"gpu.pcie.rx": [], "gpu.pcie.tx": []}
for row in csv.DictReader(open(os.path.join(out, "ours.csv"))):
    s = row["series"]
    for k in ours:
        if s == k + "{gpu0}":
            ours[k].append(float(row["value"] or 0) / 1e6)
rx = tx = []
cols = None
smi = {"rxpci": [], "txpci": []}
for line in open(os.path.join(out, "dmon.txt")):
    f = line.split()
    if line.startswith("# gpu"):
        cols = f[1:]
    elif cols and f and not line.startswith("#"):
        for k in smi:
            if k in cols and f[cols.index(k)] not in ("-",):
                smi[k].append(float(f[cols.index(k)]))
med = lambda v: statistics.median(v) if v else float("nan")
print(open(os.path.join(out, "storm.txt")).read().strip())
print(f"stackscope gpu0 rx {med(ours['gpu.pcie.rx']):.0f} MB/s, tx {med(ours['gpu.pcie.tx']):.0f} MB/s "
      f"(median of {len(ours['gpu.pcie.rx'])} samples)")
print(f"nvidia-smi dmon rxpci {med(smi['rxpci']):.0f} MB/s, txpci {med(smi['txpci']):.0f} MB/s "
      f"(median of {len(smi['rxpci'])} samples)")
PYEOF
grep -i -E "nvml|pcie" "$OUT/info.txt" | head -12
