#!/usr/bin/env bash
# GPU machine, one GPU, one device-tool command (about 3 min): a real GPU recording with planted incidents, made
# into the HTML report and the Perfetto trace that issue 17's "Done when" asks for. A small bf16 MLP trains for
# 90 s under `stackscope record` (every layer); 30 s in, a second process (comm "ss_gpuhog") runs large matmuls on
# the same GPU for 15 s (gpu_contention); 60 s in, three CPU spinners (comm "cpuhog") run for 12 s
# (cpu_interference). Results under OUT: report.html, run.pftrace.gz, analyze.json, info.txt, record.log, hogs.log.
# Afterwards, on the CPU VM: screenshots (chromium --headless --screenshot) and the schema check
# (protoc --decode=perfetto.protos.Trace with ../shared/vendor/perfetto-protos.tar.gz), see docs/REPORT.md.
# Usage (device machine, repo root, the stackscope binary at .carry/stackscope, as root):
#   bash eval/report/gpu_report.sh OUT
set -uo pipefail
out=${1:?OUT}; mkdir -p "$out"
S=$(pwd)/.carry/stackscope
w=/tmp/gpu_report; rm -rf "$w"; mkdir -p "$w"
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
export PYTHONUNBUFFERED=1
cat > "$w/train.py" <<'PY'
import sys, time, torch
seconds = float(sys.argv[1])
dev = "cuda"
model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(2048, 2048), torch.nn.GELU()) for _ in range(8)]).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn(256, 2048, device=dev)
t0 = time.time(); steps = 0
while time.time() - t0 < seconds:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x).float().pow(2).mean()
    opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
    torch.cuda.synchronize(); steps += 1
print(f"{steps} steps in {time.time() - t0:.1f} s")
PY
cat > "$w/gpuhog.py" <<'PY'
import ctypes, sys, time, torch
ctypes.CDLL(None).prctl(15, b"ss_gpuhog", 0, 0, 0)
a = torch.randn(8192, 8192, device="cuda"); t0 = time.time()
while time.time() - t0 < float(sys.argv[1]):
    a = (a @ a).clamp_(-1, 1)
torch.cuda.synchronize()
PY
cat > "$w/cpuhog.py" <<'PY'
import ctypes, sys, time
ctypes.CDLL(None).prctl(15, b"cpuhog", 0, 0, 0)
t0 = time.time()
while time.time() - t0 < float(sys.argv[1]): pass
PY
( sleep 30; date +%s.%N; python3 "$w/gpuhog.py" 15; date +%s.%N; sleep 15;
  date +%s.%N; for i in 1 2 3; do python3 "$w/cpuhog.py" 12 & done; wait; date +%s.%N ) > "$out/hogs.log" 2>&1 &
timeout 200 "$S" record -q -o "$w/run.sdb" -- python3 "$w/train.py" 90 > "$out/record.log" 2>&1
echo "record rc=$?" >> "$out/record.log"
wait
"$S" info "$w/run.sdb" > "$out/info.txt" 2>&1
"$S" analyze --no-store --json "$w/run.sdb" > "$out/analyze.json" 2> "$out/analyze.err"
"$S" analyze --no-store "$w/run.sdb" | tee "$out/analyze.txt"
"$S" report "$w/run.sdb" -o "$out/report.html"
# The trace without the cuda layer's launches (tens of thousands a second would make it hundreds of MB): Python
# stack samples (flame graphs), torch operators, NCCL, every counter and the incidents track.
"$S" export "$w/run.sdb" --format perfetto --layers torch,nccl,python -o "$out/run.pftrace"
gzip -f "$out/run.pftrace"
# One archive: the device tool brings back at most 8 files.
tar -C "$out" -cf "$out/../gpu_report.tar" . && rm -rf "$out" && mkdir -p "$out" && mv "$out/../gpu_report.tar" "$out/"
ls -la "$out"
