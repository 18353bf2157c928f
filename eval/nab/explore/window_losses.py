#!/usr/bin/env python3
"""Where a variant's NAB points go, per window (issue 18): for each label window the best detection's
weight (1.0 at the window's first row, ~0.86 at its middle, 0 at its end; -1 = missed) and where in the window it
fell, and per file the false positives' cost; totals per part: missed windows, late-detection loss (1 - weight of
found windows) and FP cost, in raw points (a raw point is 100/90 normalised points on part B, 100/76 on A).

usage: window_losses.py "KNOB=VALUE,..."   (knobs as explore.py)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from explore import evaluate, make_with  # noqa: E402
from nab_data import files, get, part  # noqa: E402


def window_rows(swept):
    out = {}
    for i, (w, n) in enumerate(swept):
        if n not in (None, 'probationary'):
            out.setdefault(n, []).append(i)
    return out


if __name__ == '__main__':
    kw = eval("dict(%s)" % (sys.argv[1] if len(sys.argv) > 1 else ""))
    per = evaluate(make_with(**kw))
    tot = {p: dict(miss=0, late=0.0, fp=0.0, nfp=0, found=0) for p in 'AB'}
    for f in files:
        d = get(f); sw = d['swept']; r = per[f]; rows = set(r['rows'])
        for n, idx in window_rows(sw).items():
            inside = [i for i in idx if i in rows]
            if inside:
                i = inside[0]; w = max(sw[j][0] for j in inside)
                tot[part[f]]['found'] += 1; tot[part[f]]['late'] += 1 - w
                print(f"{part[f]} {f:60s} win {n} found w={w:.2f} at {(i - idx[0]) / len(idx):.2f} of {len(idx)} rows")
            else:
                tot[part[f]]['miss'] += 1
                print(f"{part[f]} {f:60s} win {n} MISSED ({len(idx)} rows)")
        if r['fp']:
            tot[part[f]]['fp'] += r['fp_cost']; tot[part[f]]['nfp'] += r['fp']
            print(f"{part[f]} {f:60s} FP {r['fp']} cost {r['fp_cost']:.2f}")
    for p, t in tot.items():
        print(f"part {p}: found {t['found']} missed {t['miss']} (x2 raw vs found = {2 * t['miss']}), late loss {t['late']:.2f}, FP {t['nfp']} cost {t['fp']:.2f}")
