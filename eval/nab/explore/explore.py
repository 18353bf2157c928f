#!/usr/bin/env python3
"""Try series-detector variants on the 45 NAB files without a rebuild: the Python port (series_novelty_port.py) on the
bins the CLI makes, scored as eval/nab/nab_cli_eval.py scores the CLI (NAB standard profile, part A = every other
file of each group). Not the benchmark (that is eval/nab/run_cli.sh, through the CLI): a bench for ideas.

usage: explore.py "KNOB=VALUE,..." ...   e.g.  explore.py "" "threshold=0.05" "g=1.5,gH=4000,gstart=400"
Each argument one line: all / A / B / per group, windows found, FPs and their raw cost.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nab_data import files, groups, get, labels, normalized, null, part, score_file  # noqa: E402
from series_novelty_port import LEGACY, S9, S10, S21, S22, Novelty  # noqa: E402


def run_detector(make, f):
    """Detected rows: each reported finding's first (or report) bin, on that bin's last row."""
    d = get(f)
    det = make(d)
    rowof = {}
    for b, v, last in d['bins']:
        det.add(b, v)
        rowof[b] = last
    det.finish()
    return sorted({rowof[s.get('reported', s['first'])] for s in det.spans if s.get('reported', s['first']) is not None})


def evaluate(make, fs=None):
    per = {}
    for f in fs or files:
        d = get(f)
        rows = run_detector(make, f)
        raw, hit, nwin, fp_rows, fp_cost = score_file(d['swept'], set(rows))
        per[f] = dict(raw=raw, hit=hit, nwin=nwin, fp=fp_rows, fp_cost=fp_cost, rows=rows)
    return per


def norm(per, fs):
    raw = sum(per[f]['raw'] for f in fs)
    return normalized(raw, sum(float(null[f]['Score']) for f in fs), sum(len(labels[f]) for f in fs))


def summary(per, label=''):
    a = [f for f in files if part[f] == 'A']
    b = [f for f in files if part[f] == 'B']
    out = f"{label} all {norm(per, files):.1f} A {norm(per, a):.1f} B {norm(per, b):.1f} |"
    for g, fs in sorted(groups.items()):
        if sum(len(labels[f]) for f in fs):
            out += f" {g} {norm(per, fs):.1f}"
        else:
            out += f" {g} raw {sum(per[f]['raw'] for f in fs):.2f}"
    fp = sum(per[f]['fp'] for f in files)
    cost = sum(per[f]['fp_cost'] for f in files)
    hit = sum(per[f]['hit'] for f in files)
    nw = sum(per[f]['nwin'] for f in files)
    return out + f" | windows {hit}/{nw} FP {fp} cost {cost:.1f}"


def make_with(**kw):
    if kw.pop('legacy', False):
        kw = {**LEGACY, **kw}  # the detector before the 0f95853 fixes, the knobs given applied over it
    elif kw.pop('s9', False):
        kw = {**S9, **kw}  # the detector right after those fixes
    elif kw.pop('s10', False):
        kw = {**S10, **kw}  # the tolerant day view, no memory of recent findings
    elif kw.pop('s21', False):
        kw = {**S21, **kw}  # the product's default before the day view's weight 0.25 (e7c6d66)
    elif kw.pop('s22', False):
        kw = {**S22, **kw}  # the product's default (74dd30e)
    def make(d):
        day = int(86400 // d['bw'])
        hist = kw.get('history', 4000)
        return Novelty(season=day if 2 <= day <= hist else 0, bw=d['bw'], **kw)  # as scan_host_series sizes the season
    return make


if __name__ == '__main__':
    for arg in sys.argv[1:] or [""]:
        kw = eval("dict(%s)" % arg)  # a lab tool: the arguments are the caller's own knob settings
        print(summary(evaluate(make_with(**kw)), str(kw)), flush=True)
