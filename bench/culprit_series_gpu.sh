#!/usr/bin/env bash
# GPU machine, one GPU, about 40 s: do the culprit series (contract §2) name who interfered with a job?
# `stackscope record --layers host,nvml` of a 24 s matmul loop on GPU 0 while, from 6 s to 14 s, a process named
# cpu_hog spins on two CPUs, and from 12 s to 20 s a second process named gpu_hog computes on the same GPU.
# Expected: proc.cpu.util{pid:P:cpu_hog} ~2 over 6-14 s; proc.cpu.traced_util ~1 throughout (the job's Python
# thread); gpu.proc.present{gpu0/pid<job>/python3} throughout and {gpu0/pid<hog>/gpu_hog} over 12-20 s; the
# per-process NVML series of both. Results: OUT/culprits.csv (the series), OUT/culprits.txt (a summary).
# Usage (device machine, repo root): STACKSCOPE=.carry/stackscope bash bench/culprit_series_gpu.sh OUT
set -uo pipefail
out=${1:?OUT}; mkdir -p "$out"
bin=${STACKSCOPE:-.carry/stackscope}; py=${PYTHON:-python3}
rec=$out/culprits.sdb
cat > /tmp/culprit_job.py <<'PY'
import ctypes, sys, time, torch
name, seconds, delay = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
if name != "-":
    ctypes.CDLL(None).prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME: the comm the series show
time.sleep(delay)
x = torch.randn(4096, 4096, device="cuda")
end = time.time() + seconds
while time.time() < end:
    y = x @ x
    torch.cuda.synchronize()
PY
cat > /tmp/culprit_cpu.py <<'PY'
import ctypes, multiprocessing, sys, time
def spin(seconds):
    ctypes.CDLL(None).prctl(15, b"cpu_hog", 0, 0, 0)
    end = time.time() + seconds
    while time.time() < end:
        pass
if __name__ == "__main__":
    time.sleep(float(sys.argv[1]))
    ps = [multiprocessing.Process(target=spin, args=(8,)) for _ in range(2)]
    for p in ps: p.start()
    for p in ps: p.join()
PY
"$py" /tmp/culprit_cpu.py 6 & cpu=$!
"$py" /tmp/culprit_job.py gpu_hog 8 12 & gpu=$!
"$bin" record -q --layers host,nvml -o "$rec" -- "$py" /tmp/culprit_job.py - 24 0
wait "$cpu" "$gpu"
"$bin" export "$rec" --format csv --what samples --series 'proc.cpu.*' > "$out/culprits.csv"
"$bin" export "$rec" --format csv --what samples --series 'gpu.proc.*' >> "$out/culprits.csv"
{
  echo "job pid: $("$bin" info --json "$rec" | "$py" -c 'import json,sys; print(json.load(sys.stdin)["meta"].get("pid"))')"
  echo "series (samples, max value):"
  awk -F, 'NR > 1 && $1 != "series" { n[$1]++; if (!($1 in m) || $8 > m[$1]) m[$1] = $8 }
           END { for (s in n) printf "  %-60s %4d  %.3f\n", s, n[s], m[s] }' "$out/culprits.csv" | sort
} > "$out/culprits.txt"
cat "$out/culprits.txt"
rm -f "$rec"
