#!/usr/bin/env python3
"""Compares stackscope's NVML samples (export --format csv --what samples) with nvidia-smi's CSV readings.

Means over the window per GPU and metric; tolerances allow for the two tools sampling at different instants.
Exit status 0 when every compared metric is within tolerance, 1 otherwise.
"""
import argparse
import csv
import statistics
import sys

MIB = 1 << 20
# nvidia-smi column -> (our series name, factor from smi units to ours, absolute tolerance, relative tolerance)
COLUMNS = {
    "utilization.gpu": ("gpu.util", 0.01, 0.20, 0.0),        # % -> ratio; both average over a moving window
    "utilization.memory": ("gpu.mem.util", 0.01, 0.20, 0.0),
    "memory.used": ("gpu.mem.used", MIB, 256 * MIB, 0.05),   # MiB -> bytes
    "memory.total": ("gpu.mem.total", MIB, 2 * MIB, 0.0),
    "power.draw": ("gpu.power", 1.0, 15.0, 0.15),            # W
    "temperature.gpu": ("gpu.temp", 1.0, 3.0, 0.0),          # C
    "clocks.sm": ("gpu.clock.sm", 1e6, 60e6, 0.05),          # MHz -> Hz
    "clocks.mem": ("gpu.clock.mem", 1e6, 60e6, 0.05),
}
ORDER = ["index"] + list(COLUMNS)


def number(text):
    try:
        return float(text.strip())
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ours")
    ap.add_argument("smi")
    ap.add_argument("--load-pid", type=int)
    a = ap.parse_args()

    ours = {}  # (series, device) -> values
    with open(a.ours, newline="") as f:
        for row in csv.DictReader(f):
            name, _, dev = row["series"].partition("{")
            if row["value"]:
                ours.setdefault((name, dev.rstrip("}")), []).append(float(row["value"]))
    smi = {}  # (column, gpu index) -> values
    with open(a.smi, newline="") as f:
        for row in csv.reader(f):
            if len(row) != len(ORDER):
                continue
            idx = row[0].strip()
            for col, text in zip(ORDER[1:], row[1:]):
                v = number(text)
                if v is not None:
                    smi.setdefault((col, idx), []).append(v)

    failures = 0
    compared = 0
    gpus = sorted({k[1] for k in smi})
    print(f"{'gpu':4} {'metric':20} {'nvidia-smi':>14} {'stackscope':>14} {'tolerance':>12}  verdict")
    for idx in gpus:
        for col, (series, factor, tol_abs, tol_rel) in COLUMNS.items():
            theirs = smi.get((col, idx))
            mine = ours.get((series, f"gpu{idx}"))
            if not theirs:
                print(f"{idx:4} {col:20} {'n/a':>14} {'-':>14} {'-':>12}  skipped (nvidia-smi has none)")
                continue
            t = statistics.mean(theirs) * factor
            if not mine:
                print(f"{idx:4} {col:20} {t:14.6g} {'missing':>14} {'-':>12}  FAIL")
                failures += 1
                continue
            m = statistics.mean(mine)
            tol = max(tol_abs, tol_rel * abs(t))
            ok = abs(m - t) <= tol
            compared += 1
            failures += not ok
            print(f"{idx:4} {col:20} {t:14.6g} {m:14.6g} {tol:12.4g}  {'ok' if ok else 'FAIL'}")
    if a.load_pid:
        keys = [k for k in ours if k[0].startswith("gpu.proc.") and k[1].endswith(f"/pid{a.load_pid}")]
        print(f"load process {a.load_pid}: {len(keys)} per-process series " + ", ".join(sorted(f"{n}{{{d}}}" for n, d in keys)))
        if not any(k[0] == "gpu.proc.mem.used" for k in keys):
            print("FAIL: no gpu.proc.mem.used for the load process")
            failures += 1
    print(f"{compared} metrics compared, {failures} failures")
    return 1 if failures or not compared else 0


if __name__ == "__main__":
    sys.exit(main())
