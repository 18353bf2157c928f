#!/usr/bin/env python3
"""Fuzzy ART novelty beside the series detector (issue 18 item 5, session 17; not in the product; figures in
docs/BENCHMARKS.md "Session 17"). Session 15's next step: novelty against prototypes that are learnt and slowly
forgotten, as ART does (restated from the fuzzy ART literature, not ARTime's code). Each bin's window of its last m
bin values, scaled to [0, 1] by the range seen so far (causal) and complement-coded, is matched against at most
`maxcat` categories (choice |I ^ w| / (alpha + |w|), vigilance `rho` on |I ^ w| / m, the 20 best tried); a match
moves its category by `beta`, no match makes a new one (replacing the least recently used), and a new category after
the warm-up is an alarm. Modes as shape_novelty.py: `joint` (one stream with the default detector's reports, at most
one alarm per `cd` bins) or `union`.

usage: /usr/bin/python3 art_novelty.py [--show-b] "mode='joint',rho=0.7,m=4" ...   (numpy; part A only unless --show-b)
"""
import os
import sys

import numpy as np
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shape_novelty import base_run, warm_bins, part_a  # noqa
from explore import summary  # noqa
from nab_data import files, get, score_file  # noqa

_cache = {}

def art_alarms(f, m=8, rho=0.85, beta=0.1, maxcat=100, alpha=1e-3):
    key = (f, m, rho, beta, maxcat, alpha)
    if key in _cache: return _cache[key]
    x = base_run(f)['values']; n = len(x)
    lo = np.minimum.accumulate(x); hi = np.maximum.accumulate(x)
    W = np.zeros((0, 2 * m)); last_used = np.zeros(0); novel = np.zeros(n, bool)
    for t in range(m - 1, n):
        span = max(hi[t] - lo[t], 1e-12)
        v = (x[t - m + 1:t + 1] - lo[t]) / span
        I = np.concatenate([v, 1 - v])
        if len(W):
            mn = np.minimum(I, W); s = mn.sum(1)
            T = s / (alpha + W.sum(1)); match = s / m
            order = np.argsort(-T); hit = -1
            for j in order[:20]:
                if match[j] >= rho: hit = j; break
            if hit >= 0:
                W[hit] = beta * mn[hit] + (1 - beta) * W[hit]; last_used[hit] = t; continue
        novel[t] = True
        if len(W) >= maxcat:
            j = int(np.argmin(last_used)); W[j] = I; last_used[j] = t
        else:
            W = np.vstack([W, I]); last_used = np.append(last_used, t)
    _cache[key] = novel
    return novel

def alarm_bins(f, mode='joint', cd=200, **kw):
    b = base_run(f); w = warm_bins(f); reports = set(b['reports'])
    novel = art_alarms(f, **kw); out = []; last = -10 ** 9
    for t in range(len(novel)):
        fires = t >= w and novel[t]
        if mode == 'union' and t in reports:
            out.append(t); last = t
        elif (fires or (mode == 'joint' and t in reports)) and t - last > cd:
            out.append(t); last = t
    return out

def evaluate(**kw):
    per = {}
    for f in files:
        rowof = base_run(f)['rowof']
        rows = sorted({rowof[t] for t in alarm_bins(f, **kw)})
        raw, hit, nwin, fp_rows, fp_cost = score_file(get(f)['swept'], set(rows))
        per[f] = dict(raw=raw, hit=hit, nwin=nwin, fp=fp_rows, fp_cost=fp_cost, rows=rows)
    return per

if __name__ == '__main__':
    show_b = '--show-b' in sys.argv
    for arg in [a for a in sys.argv[1:] if a != '--show-b']:
        kw = eval("dict(%s)" % arg)  # a lab tool: the arguments are the caller's own knob settings
        per = evaluate(**kw)
        print(summary(per, arg) if show_b else part_a(per, arg), flush=True)
