#!/usr/bin/env python3
"""Fuzzy ART novelty beside the series detector (issue 18 item 5; not in the product; its best cell is in
docs/benchmarks/host-series-nab.md, "Tried and rejected"). The next step after shape_novelty.py: novelty against
prototypes that are learnt and slowly forgotten, as ART does (restated from the fuzzy ART literature, not ARTime's
code). Each bin's window of its last m bin values, scaled to [0, 1] by the range seen so far (causal) and
complement-coded, is matched against at most `maxcat` categories (choice |I ^ w| / (alpha + |w|), vigilance `rho` on
|I ^ w| / m, the 20 best tried); a match moves its category by `beta`, no match makes a new one (replacing the least
recently used), and a new category after the warm-up is an alarm. Modes as shape_novelty.py: `joint` (one stream with
the default detector's reports, at most one alarm per `cd` bins) or `union`.

usage: /usr/bin/python3 art_novelty.py [--show-b] "mode='joint',rho=0.7,m=4" ...   (numpy; part A only unless --show-b)
"""
import os
import sys

import numpy as np
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shape_novelty import base_run, combined, evaluate, part_a, warm_bins  # noqa
from explore import summary  # noqa

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
    novel = art_alarms(f, **kw); w = warm_bins(f)
    return combined(f, [t >= w and novel[t] for t in range(len(novel))], mode, cd)


if __name__ == '__main__':
    show_b = '--show-b' in sys.argv
    for arg in [a for a in sys.argv[1:] if a != '--show-b']:
        kw = eval("dict(%s)" % arg)  # a lab tool: the arguments are the caller's own knob settings
        per = evaluate(alarm_bins, **kw)
        print(summary(per, arg) if show_b else part_a(per, arg), flush=True)
