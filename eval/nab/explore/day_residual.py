"""calibrated_residual.py with a day channel: per scale in day_scales, |mean of the last s bins - median of the same
bins' means on the D days before|, calibrated the same way (its own q-quantile over H values). use_local=False keeps
only the day channel. A sketch, not in the product: the day channel alone scored all 64.5 on NAB's 45 files
(docs/benchmarks/host-series-nab.md, "Tried and rejected").

usage: day_residual.py "KNOB=VALUE,..." ...   e.g.  day_residual.py "theta=1.5,L=288,use_local=False"
"""
import os
import sys
from collections import deque

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from calibrated_residual import Rolling  # noqa: E402

class QR2:
    def __init__(self, scales=(1, 3, 12), L=48, H=2000, q=0.99, theta=1.5, suppress=100, warmup=300, season=0,
                 D=3, day_scales=(3, 12), day_w=1.0, use_local=True):
        self.__dict__.update(locals()); del self.__dict__['self']
        self.vals = deque(maxlen=max(scales) + L)
        self.hist = [Rolling(H) for _ in scales]
        self.dhist = [Rolling(H) for _ in day_scales]
        self.mhist = [dict() for _ in day_scales]
        self.n = 0; self.sup = 0; self.spans = []
    def add(self, b, x):
        self.vals.append(x); self.n += 1
        v = list(self.vals)
        best = 0
        if self.use_local:
          for k, s in enumerate(self.scales):
            if len(v) < s + 8: continue
            m = sum(v[-s:]) / s
            base = sorted(v[-(s + self.L):-s]); med = base[len(base) // 2]
            r = abs(m - med)
            h = self.hist[k]
            if len(h) >= self.warmup:
                sc = h.quant(self.q)
                best = max(best, r / sc if sc > 0 else (0 if r == 0 else 1e9))
            h.push(r)
        if self.season:
            for k, s in enumerate(self.day_scales):
                if len(v) < s: continue
                m = sum(v[-s:]) / s
                mh = self.mhist[k]; mh[b] = m
                mh.pop(b - self.D * self.season - 1, None)
                prev = [mh[b - d * self.season] for d in range(1, self.D + 1) if (b - d * self.season) in mh]
                if len(prev) < 1: continue
                prev.sort(); med = prev[len(prev) // 2]
                r = abs(m - med)
                h = self.dhist[k]
                if len(h) >= self.warmup:
                    sc = h.quant(self.q)
                    best = max(best, self.day_w * (r / sc if sc > 0 else (0 if r == 0 else 1e9)))
                h.push(r)
        if self.sup > 0: self.sup -= 1
        elif best > self.theta and self.n > self.warmup:
            self.spans.append(dict(first=b, last=b, score=best, view=0, absorbed=False)); self.sup = self.suppress
        return best
    def finish(self): pass


if __name__ == '__main__':
    import explore

    def make_with(kw):
        def make(d):
            day = int(86400 // d['bw'])
            return QR2(season=day if 2 <= day <= 2000 else 0, **kw)
        return make
    for arg in sys.argv[1:] or [""]:
        kw = eval("dict(%s)" % arg)  # a lab tool: the arguments are the caller's own knob settings
        print(explore.summary(explore.evaluate(make_with(kw)), str(kw)), flush=True)
