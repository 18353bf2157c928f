#!/usr/bin/env python3
"""A second view of the series for the range detector (issue 18): the default detector on the bins as
they are, united with a second detector on a transform of them (log: log1p of the value above the series' minimum
so far; diff: the change from the previous bin), with its own threshold. A second view's detection within `gap`
bins after any detection kept already is dropped (one incident). Scored as explore.py.

usage: ensemble.py "view='log',t2=0.3,gap=100,KNOB=..." ...   (KNOB: the second detector's knobs, as explore.py)
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import explore  # noqa: E402
from explore import make_with, summary  # noqa: E402
from nab_data import files, get, score_file  # noqa: E402


class Transform:
    def __init__(self, view): self.view = view; self.prev = None; self.lo = None
    def __call__(self, v):
        if self.view == 'log':
            self.lo = v if self.lo is None else min(self.lo, v)
            return math.log1p(v - self.lo)
        if self.view == 'diff':
            d = 0.0 if self.prev is None else v - self.prev
            self.prev = v
            return d
        if self.view.startswith(('hp', 'lr')):  # high-pass: the value against the median of the N bins before it
            n = int(self.view[2:]); h = self.hist = getattr(self, 'hist', [])
            med = sorted(h)[len(h) // 2] if h else v
            h.append(v)
            if len(h) > n: h.pop(0)
            if self.view.startswith('hp'): return v - med
            self.lo = v if self.lo is None else min(self.lo, v, med)
            return math.log1p(v - self.lo) - math.log1p(med - self.lo)
        return v


def rows_of(d, kw1, kw2, view, gap):
    det1 = make_with(**kw1)(d); det2 = make_with(**kw2)(d); tr = Transform(view)
    rowof = {}
    for b, v, last in d['bins']:
        det1.add(b, v); det2.add(b, tr(v)); rowof[b] = last
    det1.finish(); det2.finish()
    first = sorted(s.get('reported', s['first']) for s in det1.spans if s.get('reported', s['first']) is not None)
    second = sorted(s.get('reported', s['first']) for s in det2.spans if s.get('reported', s['first']) is not None)
    kept = list(first)
    for b in second:
        if not any(0 <= b - k < gap for k in kept) and not any(0 < k - b < 1 for k in kept):
            kept.append(b)
    return sorted({rowof[b] for b in kept})


def evaluate(kw1, kw2, view, gap):
    per = {}
    for f in files:
        d = get(f)
        rows = rows_of(d, kw1, kw2, view, gap)
        raw, hit, nwin, fp_rows, fp_cost = score_file(d['swept'], set(rows))
        per[f] = dict(raw=raw, hit=hit, nwin=nwin, fp=fp_rows, fp_cost=fp_cost, rows=rows)
    return per


if __name__ == '__main__':
    for arg in sys.argv[1:]:
        kw = eval("dict(%s)" % arg)
        view = kw.pop('view', 'log'); gap = kw.pop('gap', 100); t1 = kw.pop('t1', 0.05)
        kw2 = dict(kw); kw2['threshold'] = kw2.pop('t2', 0.3)
        print(summary(evaluate(dict(threshold=t1), kw2, view, gap), arg), flush=True)
