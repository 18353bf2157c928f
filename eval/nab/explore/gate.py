#!/usr/bin/env python3
"""Confirmation by a second view (issue 18): a finding of the default detector is reported at the first
of its bins where its score passes `hi` or the high-pass view agrees (the score of the range detector on the value
minus the median of the `n` bins before it, the largest over the last `lag` + 1 bins, passes `h`); a finding that never
passes either is not reported. Causal: each bin's decision uses that bin and earlier ones only.

usage: gate.py "n=24,h=0.05,hi=0.5,lag=3" ...
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ensemble import Transform  # noqa: E402
from explore import make_with, summary  # noqa: E402
from nab_data import files, get, score_file  # noqa: E402


def rows_inside(d, n=24, h=0.05, hi=0.3, lag=3, t1=0.05, cd_on_report=True, **kw2):
    """The gate inside the detector (the port's gate_h): a finding not yet confirmed starts no cool-down."""
    det = make_with(threshold=t1, gate_h=h, gate_hi=hi, cd_on_report=cd_on_report)(d)
    det2 = make_with(threshold=1e9, **kw2)(d); tr = Transform('hp%d' % n)
    rowof = {}; recent = []
    for b, v, last in d['bins']:
        recent.append(det2.add(b, tr(v))); recent = recent[-(lag + 1):]
        det.ext = max(recent); det.add(b, v); rowof[b] = last
    det.finish()
    return sorted({rowof[s['reported']] for s in det.spans if s.get('reported') is not None})


def rows_of(d, n=24, h=0.05, hi=0.5, lag=3, t1=0.05, inside=False, **kw2):
    if inside: return rows_inside(d, n, h, hi, lag, t1, **kw2)
    det = make_with(threshold=t1)(d)
    names = [n] if isinstance(n, str) else ['hp%d' % n] if isinstance(n, int) else list(n)  # n: bins, a view or views
    dets = [make_with(threshold=1e9, **kw2)(d) for _ in names]; trs = [Transform(k) for k in names]
    s1 = {}; s2 = {}; rowof = {}; order = []
    for b, v, last in d['bins']:
        s1[b] = det.add(b, v); s2[b] = max(x.add(b, t(v)) for x, t in zip(dets, trs)); rowof[b] = last; order.append(b)
    det.finish()
    pos = {b: i for i, b in enumerate(order)}
    out = set()
    for s in det.spans:
        r = s.get('reported', s['first'])
        if r is None: continue
        for i in range(pos[r], pos[s['last']] + 1):
            b = order[i]
            agree = max(s2[order[j]] for j in range(max(0, i - lag), i + 1))
            if s1[b] > hi or agree > h:
                out.add(rowof[b]); break
    return sorted(out)


if __name__ == '__main__':
    for arg in sys.argv[1:]:
        kw = eval("dict(%s)" % arg)
        per = {}
        for f in files:
            d = get(f); rows = rows_of(d, **kw)
            raw, hit, nwin, fp_rows, fp_cost = score_file(d['swept'], set(rows))
            per[f] = dict(raw=raw, hit=hit, nwin=nwin, fp=fp_rows, fp_cost=fp_cost, rows=rows)
        print(summary(per, arg), flush=True)
