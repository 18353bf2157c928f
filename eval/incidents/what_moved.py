#!/usr/bin/env python3
"""What moved during each incident of a recording, whatever the cause rules say: for every layer's window features
(`stackscope features`), each column's robust z of the incident's windows against the 60 s before it (median and
scaled MAD, floored at 1 % of the level), the top N movers per incident. For looking into "unexplained" incidents and
false ones in clean runs; it reads the recording and the analysis, decides nothing.

  python3 eval/incidents/what_moved.py STACKSCOPE REC.sdb REC.analysis.json [--top 15]
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile


def columns(stackscope, rec, layer, tmp):
    out = os.path.join(tmp, layer + ".csv")
    r = subprocess.run([stackscope, "features", rec, "--layer", layer, "-o", out], capture_output=True, text=True)
    if r.returncode != 0 or not os.path.exists(out):
        return None
    with open(out) as f:
        rows = list(csv.reader(f))
    if len(rows) < 2:
        return None
    head, body = rows[0], rows[1:]
    t0 = [int(x[0]) for x in body]
    cols = {}
    for j, name in enumerate(head[2:], start=2):
        vals = []
        for x in body:
            try:
                vals.append(float(x[j]))
            except ValueError:
                vals.append(float("nan"))
        cols[name] = vals
    return t0, cols


def robust_z(base, ep, whole):
    base = [v for v in base if v == v]
    ep = [v for v in ep if v == v]
    if len(base) < 5 or not ep:
        return None
    m = statistics.median(base)
    mad = statistics.median(abs(v - m) for v in base) * 1.4826
    # A column flat at 0 before the incident: its spread over the whole recording, so that a rare event is not
    # 1e12 deviations away.
    scale = max(mad, 0.01 * abs(m), whole, 1e-3)
    e = statistics.median(ep)
    return (e - m) / scale, m, e


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stackscope")
    ap.add_argument("recording")
    ap.add_argument("analysis")
    ap.add_argument("--top", type=int, default=15)
    a = ap.parse_args()
    rep = json.load(open(a.analysis))["recordings"][0]
    with tempfile.TemporaryDirectory() as tmp:
        layers = {}
        for layer in ("host", "nvml", "kernel", "cuda", "torch", "python", "nccl"):
            c = columns(a.stackscope, a.recording, layer, tmp)
            if c:
                layers[layer] = c
        for inc in rep.get("incidents", []):
            print(f"== {inc['start_s']:.0f}-{inc['end_s']:.0f} s {inc['cause']['class']}: {inc['summary'][:100]}")
            movers = []
            for layer, (t0, cols) in layers.items():
                # window i covers [t0[i], t0[i] + 1 s); incidents are in ns on the same clock
                ep = [i for i, t in enumerate(t0) if inc["start_ns"] <= t < inc["end_ns"]]
                base = [i for i, t in enumerate(t0) if inc["start_ns"] - 60e9 <= t < inc["start_ns"] - 2e9]
                for name, vals in cols.items():
                    finite = [v for v in vals if v == v]
                    whole = statistics.pstdev(finite) if len(finite) > 1 else 0.0
                    z = robust_z([vals[i] for i in base], [vals[i] for i in ep], whole)
                    if z:
                        movers.append((abs(z[0]), layer, name, z[1], z[2], z[0]))
            for _, layer, name, m, e, z in sorted(movers, reverse=True)[:a.top]:
                print(f"   {layer:6s} {name[:70]:70s} {m:12.4g} -> {e:12.4g}  z {z:+.1f}")


if __name__ == "__main__":
    sys.exit(main())
