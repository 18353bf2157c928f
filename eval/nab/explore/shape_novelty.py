#!/usr/bin/env python3
"""Shape novelty and an HTM-style anomaly likelihood beside the series detector (issue 18 item 5; not in
the product). Its figures are in docs/benchmarks/host-series-nab.md, "Tried and rejected".

Shape novelty (the mechanism behind ARTime, restated as a nearest neighbour, not ARTime's code): each bin's window of
its last m bin values is compared with the windows ending in the H bins before it (none overlapping it); its distance
to the nearest one, over sqrt(m) and over the value range seen so far (ARTime also normalises inputs by the range it
has seen), is the novelty. An alarm needs novelty above `thr` and the raw distance above `floor` times the median
(`floor_q` quantile) nearest-neighbour distance of the H bins before (a noise floor: on a noisy series every window
is new), and no alarm in the `cd` bins before. Causal: bin t uses bins <= t only.

HTM-style likelihood (my restatement of Numenta's anomaly likelihood): the mean of the last `avg` raw scores against
a normal fitted to such means over the last `hist` bins (the first `learn` skipped, refitted every 100 bins, mean at
least 0.03, variance at least 0.0003); the tail probability p; an alarm where p falls below `thr` (the first bin of a
run below it, as NAB's HTM filters repeats).

Other knobs: m (window, bins), floor_q (the noise floor's quantile), centred (windows less their own mean: shape
only), file_range (NAB's whole-file min/max: not causal, a measure only).

Modes (`mode=`):
  alone     the shape-novelty alarms only
  joint     one alarm stream: a shape alarm or a report of the default detector, at most one per `cd` bins
  union     every report of the default detector kept; a shape alarm kept where nothing was kept in the cd bins before
  lik       likelihood alarms alone; `src='score'`: over the default detector's per-bin score (1 - exp(-score / c),
            min(1, score) where c = 0), `src='shape'`: over the novelty (clipped to 1)

usage: /usr/bin/python3 shape_novelty.py [--show-b] "mode='joint',thr=0.12,floor=8,cd=200" ...
(numpy needed: Debian's python3 has it.) Part B is held out: without --show-b only part A is printed.
"""
import math
import os
import sys
from collections import deque

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from explore import make_with, summary  # noqa: E402
from nab_data import files, get, groups, labels, normalized, null, part, score_file  # noqa: E402

_base = {}
_nn = {}


def base_run(f):
    """The default detector over the file's bins: per-bin score, bin indices of its reports, last row of each bin."""
    if f not in _base:
        d = get(f); det = make_with()(d)
        scores = []; rowof = []; index = {}
        for i, (b, v, last) in enumerate(d['bins']):
            scores.append(det.add(b, v)); rowof.append(last); index[b] = i
        det.finish()
        reports = sorted(index[s['reported']] for s in det.spans if s.get('reported') is not None)
        _base[f] = dict(scores=scores, reports=reports, rowof=rowof, values=np.array([v for _, v, _ in d['bins']]))
    return _base[f]


def warm_bins(f):
    """As the detector warms up: max(100 bins, a day) where the day is 2 .. 4,000 bins."""
    day = int(86400 // get(f)['bw'])
    return max(100, day if 2 <= day <= 4000 else 0)


def nn_distance(x, m, history=4000, block=256, centred=False):
    """Per bin t >= m-1: Euclidean distance of x[t-m+1 .. t] to the nearest window ending in t-history .. t-m
    (centred: each window less its own mean, so that only its shape counts, not its level)."""
    n = len(x); out = np.full(n, np.nan)
    if n < m: return out
    w = np.lib.stride_tricks.sliding_window_view(x, m)
    if centred: w = w - w.mean(1, keepdims=True)
    sq = (w * w).sum(1)
    for k0 in range(0, len(w), block):
        k1 = min(len(w), k0 + block); j0 = max(0, k0 - history); j1 = max(0, k1 - m)
        if j1 <= j0: continue
        d2 = sq[k0:k1, None] + sq[None, j0:j1] - 2 * w[k0:k1] @ w[j0:j1].T
        ks = np.arange(k0, k1)[:, None]; js = np.arange(j0, j1)[None, :]
        d2[(js > ks - m) | (js < ks - history)] = np.inf
        out[k0 + m - 1:k1 + m - 1] = np.sqrt(np.maximum(d2.min(1), 0))
    return out


def shape(f, m=8, history=4000, floor_q=0.5, file_range=False, centred=False):
    """(novelty, distance over the floor_q-quantile (median) distance of the history before): see the docstring.
    file_range: normalise by the whole file's min and max, as NAB hands them to its detectors (HTM's encoder and
    ARTime's normalisation use them): not causal, a measure of what that knowledge is worth, never a candidate."""
    key = (f, m, history, floor_q, file_range, centred)
    if key not in _nn:
        x = base_run(f)['values']; d = nn_distance(x, m, history, centred=centred)
        span = np.maximum(np.maximum.accumulate(x) - np.minimum.accumulate(x), 1e-12)
        if file_range: span = np.full(len(x), max(x.max() - x.min(), 1e-12))
        novelty = np.nan_to_num(d / span / math.sqrt(m))
        over_floor = np.zeros(len(d)); w = warm_bins(f); past = deque(); srt = []
        import bisect
        for t in range(len(d)):
            if srt: over_floor[t] = d[t] / max(srt[min(len(srt) - 1, int(floor_q * len(srt)))], 1e-12)
            if t >= w and not np.isnan(d[t]):
                bisect.insort(srt, d[t]); past.append(d[t])
                if len(past) > history: srt.pop(bisect.bisect_left(srt, past.popleft()))
        _nn[key] = (novelty, np.nan_to_num(over_floor))
    return _nn[key]


class Likelihood:
    def __init__(self, avg=10, learn=288, est=100, hist=8640, reest=100, mean_floor=0.03, var_floor=0.0003):
        self.__dict__.update(locals()); del self.__dict__['self']
        self.raw = deque(maxlen=avg); self.means = deque(maxlen=hist); self.n = 0; self.dist = None

    def add(self, r):
        """The tail probability of the recent mean raw score (0.5 while learning)."""
        self.raw.append(r); self.n += 1
        m = sum(self.raw) / len(self.raw)
        if self.n > self.learn: self.means.append(m)
        if self.n <= self.learn + self.est: return 0.5
        if self.dist is None or self.n % self.reest == 0:
            mu = sum(self.means) / len(self.means); var = sum((v - mu) ** 2 for v in self.means) / len(self.means)
            self.dist = (max(mu, self.mean_floor), math.sqrt(max(var, self.var_floor)))
        mu, sd = self.dist
        x = m if m >= mu else 2 * mu - m  # as HTM: the distance from the mean either way
        return 0.5 * math.erfc((x - mu) / sd / math.sqrt(2))


def alarm_bins(f, mode='joint', m=8, thr=0.12, floor=8.0, floor_q=0.5, file_range=False, centred=False, cd=200,
               src='score', c=0.3, **lkw):
    b = base_run(f); w = warm_bins(f)
    if mode == 'lik':
        raw = b['scores'] if src == 'score' else shape(f, m)[0]
        lik = Likelihood(**lkw); out = []; before = False
        for t, s in enumerate(raw):
            r = min(1.0, s) if (src == 'shape' or c <= 0) else 1 - math.exp(-s / c)
            below = lik.add(r) < thr
            if below and not before and t >= w: out.append(t)
            before = below
        return out
    novelty, over_floor = shape(f, m, floor_q=floor_q, file_range=file_range, centred=centred)
    return combined(f, [t >= w and novelty[t] > thr and over_floor[t] > floor for t in range(len(novelty))], mode, cd)


def combined(f, fires, mode, cd):
    """Alarm bins of a second stream (`fires` per bin) with the default detector's reports: `joint` (one stream, at
    most one alarm per `cd` bins) or `union` (every report kept, the second stream's alarms where none in cd bins)."""
    reports = set(base_run(f)['reports'])
    out = []; last = -10 ** 9
    for t in range(len(fires)):
        if mode == 'union' and t in reports:
            out.append(t); last = t
        elif (fires[t] or (mode == 'joint' and t in reports)) and t - last > cd:
            out.append(t); last = t
    return out


def evaluate(alarms=None, **kw):
    """Per file: NAB's raw score and counts of the alarms `alarms(f, **kw)` (this file's alarm_bins by default)."""
    alarms = alarms or alarm_bins
    per = {}
    for f in files:
        rowof = base_run(f)['rowof']
        rows = sorted({rowof[t] for t in alarms(f, **kw)})
        raw, hit, nwin, fp_rows, fp_cost = score_file(get(f)['swept'], set(rows))
        per[f] = dict(raw=raw, hit=hit, nwin=nwin, fp=fp_rows, fp_cost=fp_cost, rows=rows)
    return per


def part_a(per, label):
    a = [f for f in files if part[f] == 'A']
    def norm(fs):
        return normalized(sum(per[f]['raw'] for f in fs), sum(float(null[f]['Score']) for f in fs),
                          sum(len(labels[f]) for f in fs))
    out = f"{label} A {norm(a):.1f} |"
    for g, fs in sorted(groups.items()):
        fa = [f for f in fs if part[f] == 'A']
        out += (f" {g} {norm(fa):.1f}" if sum(len(labels[f]) for f in fa)
                else f" {g} raw {sum(per[f]['raw'] for f in fa):.2f}")
    return out + (f" | A windows {sum(per[f]['hit'] for f in a)}/{sum(per[f]['nwin'] for f in a)}"
                  f" FP {sum(per[f]['fp'] for f in a)}")


if __name__ == '__main__':
    show_b = '--show-b' in sys.argv
    for arg in [a for a in sys.argv[1:] if a != '--show-b']:
        kw = eval("dict(%s)" % arg)  # a lab tool: the arguments are the caller's own knob settings
        per = evaluate(**kw)
        print(summary(per, arg) if show_b else part_a(per, arg), flush=True)
