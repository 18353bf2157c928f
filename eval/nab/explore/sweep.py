#!/usr/bin/env python3
"""A variant at each threshold of a grid, the threshold chosen on part A (as the benchmark's protocol: chosen on A,
reported on B and on all): explore.py's knobs, the grid in $GRID (comma-separated), $JOBS processes (2). Prints A's choice and, with --all,
every cell.

usage: sweep.py [--all] "KNOBS" ...   e.g.  sweep.py "long_bins=24,long_kind='median'"
"""
import os
import sys
from multiprocessing import Pool

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from explore import evaluate, make_with, norm  # noqa: E402
from nab_data import files, part  # noqa: E402

GRID = tuple(float(x) for x in os.environ.get("GRID", "0.03,0.04,0.05,0.065,0.08,0.1,0.13,0.16,0.2").split(","))


def cell(args):
    knobs, t = args
    kw = eval("dict(%s)" % knobs)  # a lab tool: the caller's own knob settings
    kw['threshold'] = t
    per = evaluate(make_with(**kw))
    a = [f for f in files if part[f] == 'A']; b = [f for f in files if part[f] == 'B']
    return (t, norm(per, files), norm(per, a), norm(per, b), sum(per[f]['hit'] for f in files), sum(per[f]['fp'] for f in files))


if __name__ == '__main__':
    show_all = '--all' in sys.argv
    variants = [x for x in sys.argv[1:] if x != '--all'] or [""]
    with Pool(int(os.environ.get("JOBS", "2"))) as pool:
        results = pool.map(cell, [(knobs, t) for knobs in variants for t in GRID], chunksize=1)
        for i, knobs in enumerate(variants):
            rows = results[i * len(GRID):(i + 1) * len(GRID)]
            best = max(rows, key=lambda r: r[2])
            if show_all:
                for r in rows: print(f"  {knobs} thr {r[0]}: all {r[1]:.1f} A {r[2]:.1f} B {r[3]:.1f} win {r[4]} FP {r[5]}")
            print(f"{knobs or 'default'}: A's thr {best[0]}: all {best[1]:.1f} A {best[2]:.1f} B {best[3]:.1f} win {best[4]} FP {best[5]}"
                  f" | best all {max(r[1] for r in rows):.1f} best B {max(r[3] for r in rows):.1f}", flush=True)
