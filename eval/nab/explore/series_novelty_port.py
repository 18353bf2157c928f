"""A Python port of src/analyze/detectors/series_novelty.cpp, for trying detector changes on NAB in seconds rather
than a rebuild per idea. With every knob at its default it gives the spans of the C++ detector on all 45 files' bins
(checked span by span after the day-view, cool-down and level-shift fixes of 0f95853) and so the CLI's NAB figures
(docs/benchmarks/host-series-nab.md). LEGACY (explore.py "legacy=True") gives the detector before those fixes
(68.6 / A 70.9 / B 66.7). The C++ is the product; this is a lab bench.

Knobs beyond the C++ options (each an experiment of issue 18; the current figures and a list of what was tried are in
docs/benchmarks/host-series-nab.md, every earlier figure in the git history of docs/BENCHMARKS.md):
  adapt, adapt_q, adapt_hist, clip  report a finding only once its score passes adapt x the q-quantile of the
                                    series' own recent scores (HTM-likelihood-like per-series bar)
  persist, spike                    report only after `persist` bins outside, unless the score passes `spike`
  w                                 weights of the value / level / spread views' excess
  learn_close                       a finding's bins join the range once it closes (recurring shapes learned)
  ov_last, ov_clip                  the cool-down override's "above the last finding's score" condition
  rel                               the range width's floor relative to its bounds
  cd_extend, cd_dir, cd_on_report   cool-down renewed while exceedances go on / not across directions / from the
                                    report, not the open
  long_bins, long_w                 a fifth view: the mean of the last long_bins bins (a second time scale)
  g, gH, gstart                     alarm budget: the bar is threshold x g^(reports in the last gH bins)
  fix_season                        the season view judged only once its own range has warmup_bins defined values
                                    (the C++ pushes 0 until a day has passed: a 0 .. 0 range, scores near 1e306)
  winsor                            the season view remembers values clipped to the value range
  cd_close                          the cool-down ends at most cd_close bins after the finding closes
  relv                              every view's range width at least relv x the value view's scale
  bw, cooldown_s                    bin width (s); the cool-down at most cooldown_s (C++ cooldown_max_seconds)
  hold_s, hold_min, max_hold        the new normal after hold_s, within hold_min .. max_hold bins
  learn_after                       the range learns from an open finding after this many bins; the finding goes on
                                    while value or level stay outside the range it left (None: ends at max_hold)
  cap                               the largest excess (C++ kMaxExcess)
  season_warm, warm_season          defined day-view values before it is judged; warm-up of at least a day
A tolerant day view and a longer range (C++ defaults: season_w=2, learn_close on the day view with lc_clip=0.5,
override_abs=2.0, history=4000, cooldown=100; "s9=True" in explore.py gives the detector without them; checked against
the CLI on all 45 files: the same A / B / all figures, windows and false positives at every threshold of the grid):
  season_w                          the day view against the levels a day earlier shifted by up to season_w bins
  learn_close, lc_clip, lc_views    a short finding's values of lc_views join those ranges when it closes, clipped to
                                    lc_clip range widths beyond them (None: the day view only, where there is one)
  override_abs                      the cool-down override in range widths (None: override x threshold, as before)
  sg_days, sg_w, sg_agg, sg_views   (not kept) views also judged against the same time of day on sg_days days before
  tailq, tail_thr, tail_views       (not kept) an excess counts only if also beyond the view's own tail
A memory of recent findings (C++ defaults: fmem=1000, threshold=0.05; "s10=True" gives the detector without it):
  fmem, fmem_views                  a finding's values of fmem_views are remembered for fmem bins after it ends; those
                                    views are judged against their range widened to them (C++ repeat_memory_bins;
                                    fmem_s bounds it in time as repeat_memory_max_seconds does)
  gpd_q, gpd_u, gpd_min, gpd_xi,    (not kept) an extreme-value tail (method-of-moments GPD over the top gpd_u share of
  gpd_mode, gpd_views               the view's last `history` values, SPOT-like): 'and' = an excess counts only where
                                    the tail probability of the value is below gpd_q; 'replace' = the excess is
                                    log10(gpd_q / p) instead of the range excess
A second view on the value against its local median (long_kind='hp' not kept; confirmation on since, below):
  long_kind='hp'                    the 5th view (long_bins) is the value minus the median of the long_bins bins before
  confirm_n, gate_h, gate_hi,       confirmation (C++ confirm_median_bins, confirm_excess, confirm_alone_excess,
  confirm_lag                       confirm_lag_bins): a finding is reported from the first bin where its score passes
                                    gate_hi or a second detector on the value minus the median of the confirm_n bins
                                    before it scores above gate_h within the last confirm_lag + 1 bins; the CLI with
                                    confirm_median_bins 96 gives the same figures as "confirm_n=96"
A spread robust to single spikes, a held shift yielding to a new departure, confirmation on (C++ defaults:
"yield_new=True,confirm_n=192,gate_h=0.05,mad_bins=36,mad_w=0.5,mad_rel=0.03,fmem_views=(0,1,2,5)", the port's own
defaults left as they were so that every earlier figure still reproduces):
  long_kind='median'                the 5th view is the median of the last long_bins bins (a level robust to spikes)
  mad_bins, mad_w, mad_rel          a 6th view: the median absolute deviation of the last mad_bins values (a spread
                                    robust to single spikes), its excess weighted mad_w, its range width floored at
                                    mad_rel x the value range's width (C++ robust_spread_*)
  qrange, qviews                    (not kept) the range of qviews as the (1-qrange) .. qrange quantiles of their
                                    history instead of its min .. max (forgets a warm-up's extremes)
  forget_warm                       (not kept) once forget_warm x the warm-up has been pushed, the ranges no longer
                                    hold the warm-up's values (a start-up transient)
A held level shift lasting to its return (C++ defaults: the knobs above plus "yield_new=3,fmem_learnt=(0,1),
ret_guard=36,yield_resume=True,season_unlearn='clip'", checked against the CLI file by file on all 45 files):
  fmem_learnt                       the views a finding remembers (fmem) when it was held until the range learnt
                                    from it (a level shift); None: fmem_views, as for any other finding
                                    (C++ remember_learnt_spreads = false is (0,1))
  yield_new=3                       a held finding yields to a new departure only while its value is still
                                    outside the range it left (its return to that range is its end, not a new finding)
  yield_conf                        (not kept) a held finding yields only to a departure that would be reported
  ret_guard                         a held finding that ends with its value back in the range it left leaves the spread
                                    views unjudged for ret_guard bins (their windows straddle its return)
  yield_resume                      a held finding that yielded to a departure resumes if that departure's finding
                                    ends unreported (noise within the shift), or if the value returns to the range the
                                    held finding left while that finding is open and unreported; 2: also after a
                                    reported one closes, while the value is still outside that range (a spike inside
                                    a held shift is a finding of its own, the shift goes on); 3: and a departure the
                                    value returns from while it is open, reported or not, was the shift's return
  season_unlearn                    when the range starts learning from a held finding, the bins it held so far leave
                                    the day view's history (replaced by a day earlier's), as a short finding's do;
                                    'clip': its first `short` bins are clipped to the range of its bins since
                                    (C++ held_start_clipped_in_day_history; yield_new=3, ret_guard and yield_resume
                                    together are C++ held_shift_lasts_to_its_return)
  cd_after_close                    (not kept) the cool-down also runs for `cooldown` bins from a finding's close
  mad_q                             (not kept) the robust spread's quantile of the absolute deviations (0.5: the MAD);
                                    0.9 is high where more than a tenth of its window departs (a cluster of spikes)
  dq_bins, dq, dq_w                 (not kept) a 7th view: the dq quantile of the absolute deviations from the median of
                                    the last dq_bins values, weight dq_w (a cluster of spikes, where single ones are
                                    not new)
  spread_trim                       (not kept) the 6-bin spread without the value farthest from the level
  trim_view                         (not kept) that as a 7th view beside the spread, its excess weighted trim_view
  back_mid                          (not kept) a held shift's value nearer the range it left than the shift's level
                                    (the level view's when the range began to learn) counts as returned
Forgetting the warm-up and a separate report threshold (none kept):
  fw_views                          the views whose ranges forget the warm-up (forget_warm); all by default
  fw_clip                           with forget_warm, the warm-up's extremes still widen the range, up to fw_clip x
                                    the width of the range since (0: forgotten)
  open_thr                          findings open (and cool-downs, learning, memory run) at open_thr; the threshold
                                    only decides which are reported (as NAB thresholds a score stream afterwards)
"""
import math
from collections import deque

# The detector before the day-view, cool-down and level-shift fixes of 0f95853:
# explore.py "legacy=True,KNOB=..." starts from these and applies the knobs given over them.
# The detector right after those fixes (explore.py "s9=True"): range of 2,000 bins, the day view against the
# same bins a day earlier only, findings never learnt, the cool-down override in thresholds, threshold 0.05.
S9 = dict(threshold=0.05, history=2000, cooldown=200, season_w=0, learn_close=False, lc_clip=None, override_abs=None, fmem=0)
# The detector with the tolerant day view and no memory of recent findings (explore.py "s10=True"), threshold 0.08.
S10 = dict(threshold=0.08, fmem=0)
# The product's default before the day view's weight changed (explore.py "s21=True"; e7c6d66).
S21 = dict(threshold=0.05, confirm_n=192, gate_h=0.05, mad_bins=36, mad_w=0.5, mad_rel=0.03, fmem_views=(0, 1, 2, 5),
           yield_new=3, fmem_learnt=(0, 1), ret_guard=36, yield_resume=True, season_unlearn='clip')
# The product's default (explore.py "s22=True"; 74dd30e): the day view's weight 0.25 (was 0.3).
S22 = dict(S21, season_weight=0.25)
LEGACY = dict(S9, threshold=0.065, max_hold=100, fix_season=False, cap=float('inf'), cooldown_s=0.0, hold_s=0.0, hold_min=0,
              learn_after=None, warm_season=False)

class SlidingRange:
    def __init__(self): self.low = deque(); self.high = deque()
    def push(self, idx, v, cap):
        while self.low and self.low[-1][1] >= v: self.low.pop()
        self.low.append((idx, v))
        while self.high and self.high[-1][1] <= v: self.high.pop()
        self.high.append((idx, v))
        while self.low[0][0] + cap <= idx: self.low.popleft()
        while self.high[0][0] + cap <= idx: self.high.popleft()

class SortedWindow:
    """The last `cap` pushed values, sorted: an extreme-value (GPD) tail fitted to the top `u` share of them
    (gpd_q knobs, not kept)."""
    def __init__(self): self.q = deque(); self.s = []
    def push(self, idx, v, cap):
        import bisect
        self.q.append((idx, v)); bisect.insort(self.s, v)
        while self.q[0][0] + cap <= idx:
            o = self.q.popleft()[1]; del self.s[bisect.bisect_left(self.s, o)]
    def tail_p(self, v, upper, u_share, kmin, xi_max):
        """P(next value beyond v) from a method-of-moments GPD fit of the exceedances over the (1-u_share)
        quantile, upper or lower tail; 0 where the tail is degenerate (v beyond every value ever seen)."""
        n = len(self.s)
        k = max(kmin, int(u_share * n))
        if n < k + 1: return 0.0
        if upper:
            u = self.s[n - k - 1]; y = [x - u for x in self.s[n - k:]]; e = v - u
        else:
            u = self.s[k]; y = [u - x for x in self.s[:k]]; e = u - v
        if e <= 0: return k / n
        m = sum(y) / k
        s2 = sum((a - m) ** 2 for a in y) / max(1, k - 1)
        if m <= 0 or s2 <= 0: return 0.0
        r = m * m / s2
        xi = min(xi_max, max(-0.5, 0.5 * (1 - r))); sig = 0.5 * m * (1 + r)
        if abs(xi) < 1e-6: return k / n * math.exp(-e / sig)
        base = 1 + xi * e / sig
        if base <= 0: return 0.0
        return k / n * base ** (-1 / xi)

class Novelty:
    def __init__(self, threshold=0.05, history=4000, short=6, warmup=100, cooldown=100, override=40,
                 close_after=3, max_hold=2000, floor=0.0, season=0, season_weight=0.3, adapt=0.0, adapt_hist=2000, adapt_q=0.99, clip=10.0, w=(1, 1, 1), persist=0, spike=1e9, learn_close=None, ov_last=True, ov_clip=float('inf'), rel=1e-12, cd_extend=0, cd_dir=False, long_bins=0, long_w=1.0, g=0.0, gH=2000, cd_on_report=False, gstart=0, fix_season=True, winsor=False, relv=0.0, cd_close=-1, bw=0.0, cooldown_s=86400.0, hold_s=604800.0, hold_min=100, cap=1000.0, season_warm=None, learn_after=100, warm_season=True, yield_new=False, sg_days=0, sg_w=3, sg_agg='max', sg_views=(0, 1), season_w=2, tailq=0.0, tail_thr=1.0, tail_views=(0, 1), lc_clip=0.5, lc_views=(3,), override_abs=2.0, gpd_q=0.0, gpd_u=0.02, gpd_views=(0, 1, 2), gpd_min=10, gpd_mode='and', gpd_xi=0.5, fmem=1000, fmem_views=(0, 1, 2), fmem_s=604800.0, long_kind='mean', mad_bins=0, mad_w=1.0, mad_rel=0.0, qrange=0.0, qviews=(0, 1, 2, 5), forget_warm=0, fw_views=(0, 1, 2, 3, 4, 5), fw_clip=0.0, gate_h=None, gate_hi=0.3, confirm_n=0, confirm_lag=3, open_thr=None, fmem_learnt=None, yield_conf=False, ret_guard=0, yield_resume=False, season_unlearn=False, cd_after_close=False, back_mid=False, mad_q=0.5, dq_bins=0, dq=0.9, dq_w=0.5, spread_trim=0, trim_view=0.0):
        self.__dict__.update(locals()); del self.__dict__['self']
        if confirm_n:  # the confirming detector on the value minus the median of the confirm_n bins before
            kw = {k: v for k, v in self.__dict__.items() if k not in ('confirm_n',)}
            kw.update(threshold=1e9, confirm_n=0, gate_h=None, open_thr=None)
            self.confirm = Novelty(**kw); self.confirm_vals = []; self.confirm_recent = []
            if gate_h is None: self.gate_h = 0.02
        # Durations bounded in time where the bin width is known (as the C++ does with bin_seconds).
        if bw > 0 and cooldown_s > 0: self.cooldown = max(1, min(cooldown, int(cooldown_s // bw)))
        if bw > 0 and fmem_s > 0 and fmem > 0: self.fmem = max(1, min(fmem, int(fmem_s // bw)))
        if bw > 0 and hold_s > 0: self.max_hold = max(hold_min, min(max_hold, int(hold_s // bw)))
        if season_warm is None: self.season_warm = warmup
        if learn_close is None: self.learn_close = season > 0  # the C++ learns the day view only, where there is one
        if warm_season and season > 0: self.warmup = max(warmup, season)
        self.dyn = threshold if open_thr is None else open_thr  # open_thr (lab): findings open at it, the threshold only decides reports
        self.ranges = [SlidingRange() for _ in range(7)]; self.lrecent = deque()
        self.pushed = 0; self.npushed_season = 0; self.alarms = deque(); self.nb = 0; self.last_above = None; self.pending = []; self.shist = deque(); self.bar = 0; self.recent = deque(); self.past = deque(); self.pastd = {}
        self.cd = 0; self.quiet = 0; self.held = 0; self.open = None; self.last_value_bin = None; self.learning = False; self.ref = None
        self.last_score = 0; self.last_bin = 0; self.spans = []; self.tails = {}
        self.sorted = [SortedWindow() for _ in range(6)] if (gpd_q > 0 or qrange > 0) else None
        self.franges = [SlidingRange() for _ in range(7)]; self.fpending = []; self.wext = {}; self.guard = 0; self.returned = False; self.yielded = None

    def _out_ref(self, k, v, ref=None):
        """The value (k 0) or level (k 1) outside the range the open finding left, once the range learns again."""
        lo, hi = (ref or self.ref)[k]
        width = max(hi - lo, self.floor, self.rel * max(abs(lo), abs(hi)), 1e-300)
        return min(self.cap, max(v - hi, lo - v, 0.0) / width) > self.dyn

    def _past_level(self, lo, hi):
        s = 0; m = 0
        for b in range(lo, hi + 1):
            p = self.pastd.get(b)
            if p is not None: s += p[1]; m += 1
        return s / m if m else None

    def add(self, b, value):
        self.cur_value = value
        if self.confirm_n:
            h = self.confirm_vals; med = sorted(h)[len(h) // 2] if h else value
            h.append(value)
            if len(h) > self.confirm_n: h.pop(0)
            self.confirm_recent.append(self.confirm.add(b, value - med))
            self.confirm_recent = self.confirm_recent[-(self.confirm_lag + 1):]
            self.ext = max(self.confirm_recent)
        self.recent.append(value)
        if len(self.recent) > self.short: self.recent.popleft()
        n = len(self.recent); level = sum(self.recent) / n
        spread = math.sqrt(sum((x - level) ** 2 for x in self.recent) / n)
        if self.spread_trim and n > 2:  # lab: the spread without the value farthest from the level (one spike is the value view's)
            kept = sorted(self.recent, key=lambda x: abs(x - level))[:n - 1]
            km = sum(kept) / len(kept); spread = math.sqrt(sum((x - km) ** 2 for x in kept) / len(kept))
        season = 0.0; season_ok = not self.fix_season
        self.last_bin = b
        if self.season > 0:
            sv = value
            if self.winsor and self.pushed >= self.warmup:
                sv = min(max(value, self.ranges[0].low[0][1]), self.ranges[0].high[0][1])
            p = [b, sv]; self.past.append(p); self.pastd[b] = p
            keep = max(self.season + self.short + self.season_w + self.max_hold + self.close_after, self.sg_days * self.season + self.sg_w + 1)
            while self.past[0][0] + keep < b: del self.pastd[self.past.popleft()[0]]
            if b + 1 >= self.season + self.short + self.season_w:
                hi = b - self.season; lo = hi + 1 - self.short
                if self.season_w > 0:
                    lv = [self._past_level(lo + j, hi + j) for j in range(-self.season_w, self.season_w + 1)]
                    lv = [x for x in lv if x is not None]
                    if lv:
                        season = level - min(max(level, min(lv)), max(lv)); season_ok = True
                else:
                    then = self._past_level(lo, hi)
                    if then is not None: season = level - then; season_ok = True
        views = [value, level, spread, season]
        used = 4 if self.season > 0 else 3
        if self.long_bins and self.long_kind == 'hp':  # the value against the median of the bins before
            med = sorted(self.lrecent)[len(self.lrecent) // 2] if self.lrecent else value
            self.lrecent.append(value)
            if len(self.lrecent) > self.long_bins: self.lrecent.popleft()
            views.append(value - med)
        elif self.long_bins and self.long_kind == 'median':  # a level robust to single spikes
            self.lrecent.append(value)
            if len(self.lrecent) > self.long_bins: self.lrecent.popleft()
            srt = sorted(self.lrecent); views.append(srt[len(srt) // 2])
        elif self.long_bins:
            self.lrecent.append(value)
            if len(self.lrecent) > self.long_bins: self.lrecent.popleft()
            views.append(sum(self.lrecent) / len(self.lrecent))
        if self.mad_bins:  # spread robust to single spikes (median absolute deviation)
            self.mrecent = getattr(self, 'mrecent', deque()); self.mrecent.append(value)
            if len(self.mrecent) > self.mad_bins: self.mrecent.popleft()
            srt = sorted(self.mrecent); med = srt[len(srt) // 2]
            dev = sorted(abs(x - med) for x in self.mrecent)
            while len(views) < 5: views.append(0.0)
            views.append(dev[len(dev) // 2] if self.mad_q == 0.5 else dev[min(len(dev) - 1, int(self.mad_q * len(dev)))])
        if self.trim_view:  # lab: a 7th view, the 6-bin spread without the value farthest from the level, weight trim_view
            rn = len(self.recent)
            kept = sorted(self.recent, key=lambda x: abs(x - level))[:max(1, rn - 1)]
            km = sum(kept) / len(kept)
            while len(views) < 6: views.append(0.0)
            views.append(math.sqrt(sum((x - km) ** 2 for x in kept) / len(kept)))
        if self.dq_bins:  # lab: a 7th view, the dq quantile of the absolute deviations from the median of the last dq_bins
            self.dqrecent = getattr(self, 'dqrecent', deque()); self.dqrecent.append(value)
            if len(self.dqrecent) > self.dq_bins: self.dqrecent.popleft()
            srt = sorted(self.dqrecent); med = srt[len(srt) // 2]
            dev = sorted(abs(x - med) for x in self.dqrecent)
            while len(views) < 6: views.append(0.0)
            views.append(dev[min(len(dev) - 1, int(self.dq * len(dev)))])
        score = 0; here = None; value_outside = False
        if self.guard > 0: self.guard -= 1
        sg = self._seasonal_bounds(b) if (self.sg_days and self.season > 0) else None
        if self.pushed >= self.warmup:
            for k in self._extra(used):
                if k == 3 and (not season_ok or self.npushed_season < self.season_warm): continue
                if self.guard > 0 and k in (2, 5, 6): continue  # ret_guard: the spread windows straddle a held shift's return
                lo = self.ranges[k].low[0][1]; hi = self.ranges[k].high[0][1]
                if self.qrange > 0 and k in self.qviews and self.sorted[k].s:  # (lab) a range of quantiles
                    srt = self.sorted[k].s; nq = len(srt)
                    lo = srt[min(nq - 1, int((1 - self.qrange) * nq))]; hi = srt[max(0, int(self.qrange * nq) - 1)]
                vlo = self.ranges[0].low[0][1]; vhi = self.ranges[0].high[0][1]
                width = max(hi - lo, self.floor, self.rel * max(abs(lo), abs(hi)), self.relv * max(vhi - vlo, abs(vhi), abs(vlo)), (self.mad_rel * (vhi - vlo) if k == 5 or (k == 6 and self.dq_bins) else 0.0), 1e-300)
                if self.tailq and k in self.tail_views and k in self.tails:
                    srt = self.tails[k][1]; nq = len(srt)
                    qhi = srt[min(nq - 1, int(self.tailq * nq))]; qlo = srt[max(0, int((1 - self.tailq) * nq))]
                    if views[k] > hi: tex = (views[k] - hi) / max(hi - qhi, 1e-12 * abs(hi), 1e-300)
                    elif views[k] < lo: tex = (lo - views[k]) / max(qlo - lo, 1e-12 * abs(lo), 1e-300)
                    else: tex = 0.0
                    if tex <= self.tail_thr: continue
                if self.fw_clip > 0 and self._forgets_warmup(k) and k in self.wext:
                    w0 = hi - lo; wl, wh = self.wext[k]  # the warm-up's extremes, clipped to fw_clip widths beyond the range since
                    lo = min(lo, max(wl, lo - self.fw_clip * w0)); hi = max(hi, min(wh, hi + self.fw_clip * w0))
                    width = max(hi - lo, width)
                if self.sg_days and k in self.sg_views and sg is not None:
                    lo = min(lo, sg[0]); hi = max(hi, sg[1])
                if self.fmem and k in self.fmem_views:
                    fr = self.franges[k]
                    while fr.low and fr.low[0][0] + self.fmem <= self.nb: fr.low.popleft()
                    while fr.high and fr.high[0][0] + self.fmem <= self.nb: fr.high.popleft()
                    if fr.low: lo = min(lo, fr.low[0][1]); hi = max(hi, fr.high[0][1])
                ex = min(self.cap, max(views[k] - hi, lo - views[k], 0.0) / width) * (self.season_weight if k == 3 else (self.long_w if k == 4 else (self.mad_w if k == 5 else ((self.trim_view or self.dq_w) if k == 6 else self.w[k]))))
                if self.gpd_q > 0 and k in self.gpd_views and (ex > 0 or self.gpd_mode == 'replace'):
                    if self.gpd_mode == 'replace':
                        p = min(self.sorted[k].tail_p(views[k], True, self.gpd_u, self.gpd_min, self.gpd_xi),
                                self.sorted[k].tail_p(views[k], False, self.gpd_u, self.gpd_min, self.gpd_xi))
                    else:
                        p = self.sorted[k].tail_p(views[k], views[k] > hi, self.gpd_u, self.gpd_min, self.gpd_xi)
                    if self.gpd_mode == 'and' and p > self.gpd_q: ex = 0.0
                    elif self.gpd_mode == 'replace':
                        ex = self.cap if p <= 0 else min(self.cap, max(0.0, math.log10(self.gpd_q / p)))
                        ex *= (self.season_weight if k == 3 else 1.0)
                if k == 0 and ex > self.dyn: value_outside = True
                if ex > score:
                    score = ex
                    here = dict(first=b, last=b, score=ex, view=k, value=views[k], lo=lo, hi=hi, above=views[k] > hi,
                                absorbed=False)
        outside = score > self.dyn
        bar = self.threshold
        self.nb += 1
        while self.alarms and self.alarms[0] + self.gH <= self.nb: self.alarms.popleft()
        if self.g > 0: bar = self.threshold * (self.g ** len(self.alarms))
        if self.adapt > 0 and outside and self.open is None and self.shist:
            h = sorted(self.shist)
            bar = max(bar, self.adapt * h[min(len(h) - 1, int(self.adapt_q * len(h)))])
        if self.pushed >= self.warmup:
            self.shist.append(min(score, self.clip))
            if len(self.shist) > self.adapt_hist: self.shist.popleft()
        if self.cd > 0: self.cd -= 1
        if (self.yield_resume and self.yielded is not None and self.open is not None and not self.learning and
                (self.open['reported'] is None or self.yield_resume == 3) and not self._out_ref(0, value, self.yielded[1])):
            # yield_resume: the held shift returns while the departure it yielded to is open, unreported: part of it
            held_before, self.yielded = self.yielded, None
            self._give_back(held_before)
        self.returned = self.open is not None and self.learning and not self._out_ref(0, value)
        if self.back_mid and self.open is not None and self.learning and not self.returned:
            # lab: a value nearer the range the shift left than the shift's level is on its way back
            lo, hi = self.ref[0]
            self.returned = max(lo - value, value - hi, 0.0) < abs(value - self.held_level)
        if self.open is not None and self.learning and self.yield_new and outside and (
                self.cd == 0 or (score > self._override() and score > self.last_score)) and (
                self.yield_new != 2 or not (self._out_ref(0, value) or self._out_ref(1, level))) and (
                self.yield_new != 3 or (self._out_ref(0, value) and not self.returned)) and (
                not self.yield_conf or (score > bar and self._confirmed(score))):
            yielding = (self.open, self.ref, self.held, self.nb) if self.yield_resume else None
            self.close()  # yield_new: a departure from the learnt range ends the extended finding
            self.yielded = yielding
        if self.open is None:
            overrides = score > self._override() and (not self.ov_last or score > min(self.last_score, self.ov_clip))
            if outside and self.cd > 0 and not overrides and self.cd_extend > 0:
                self.cd = max(self.cd, self.cd_extend)
            other_dir = self.cd_dir and here is not None and self.last_above is not None and here['above'] != self.last_above
            if outside and (self.cd == 0 or overrides or other_dir):
                self.last_above = here['above']
                self.open = here; self.last_score = score; self.quiet = 0; self.held = 0
                self.bar = bar; self.open['reported'] = b if (score > bar and (self.persist <= 1 or score > self.spike) and self._confirmed(score)) else None
                if not self.cd_on_report or self.open['reported'] is not None: self.cd = self.cooldown
                if self.open['reported'] is not None: (self.alarms.append(self.nb) if self.nb > self.gstart else None)
                self.open['nout'] = 1
                self.last_value_bin = b if value_outside else None
        elif outside or (self.learning and (self._out_ref(0, value) or self._out_ref(1, level))):
            if self.learning and self._out_ref(0, value): value_outside = True
            self.quiet = 0; self.open['last'] = b
            self.open['nout'] = self.open.get('nout', 0) + 1
            if self.open['reported'] is None and score > self.bar and (self.open['nout'] >= self.persist or score > self.spike) and self._confirmed(score):
                self.open['reported'] = b; (self.alarms.append(self.nb) if self.nb > self.gstart else None)
                if self.cd_on_report: self.cd = self.cooldown
            if value_outside: self.last_value_bin = b
            if outside and here['score'] > self.open['score']:
                f, l, r, n = self.open['first'], self.open['last'], self.open['reported'], self.open['nout']
                self.open = here; self.open['first'] = f; self.open['last'] = l; self.open['reported'] = r; self.open['nout'] = n
        else:
            self.quiet += 1
            if self.quiet >= self.close_after: self.close()
        if self.open is not None:
            self.held += 1
            if self.learn_after is not None and not self.learning and self.held > min(self.learn_after, self.max_hold):
                self.learning = True; self.yielded = None; self.held_level = level
                self.ref = [(self.ranges[k].low[0][1], self.ranges[k].high[0][1]) for k in (0, 1)]
                if self.season_unlearn == 'clip' and self.season > 0:  # its first short bins clipped to the range of its bins since
                    f0 = self.open['first']; later = [p[1] for p in self.past if p[0] >= f0 + self.short]
                    if later:
                        lo, hi = min(later), max(later)
                        for p in self.past:
                            if f0 <= p[0] < f0 + self.short: p[1] = min(max(p[1], lo), hi)
                elif self.season_unlearn and self.season > 0:  # its bins so far leave the day view's history, as a short finding's do
                    for p in self.past:
                        if p[0] < self.open['first'] or p[0] < self.season: continue
                        q = self.pastd.get(p[0] - self.season)
                        if q is not None: p[1] = q[1]
            if self.held > self.max_hold:
                self.open['absorbed'] = True; self.close()
        if self.open is not None and not self.open.get('absorbed') and self.learn_close and not self.learning:
            self.pending.append([v if (k != 3 or season_ok) else None for k, v in enumerate(views)])
        if self.fmem:
            if self.open is not None and not self.learning: self.fpending.append(views)
            elif self.fpending:
                # fmem_learnt (lab): a finding held until the range learns (a level shift, the new normal)
                # remembers only these views (None: all of fmem_views)
                kept = self.fmem_views if (self.fmem_learnt is None or not self.learning) else self.fmem_learnt
                for vv in self.fpending:
                    for k in kept: self.franges[k].push(self.nb, vv[k], self.fmem)
                self.fpending = []
        if self.open is None and self.pending:
            bounds = [(self.ranges[k].low[0][1], self.ranges[k].high[0][1]) if self.ranges[k].low else None for k in range(used)]
            for vv in self.pending:
                for k in self._extra(used):
                    x = vv[k]
                    if x is None or k not in self.lc_views: continue
                    if self.lc_clip is not None and k < used and bounds[k] is not None:
                        lo, hi = bounds[k]; w = max(hi - lo, self.floor)
                        x = min(max(x, lo - self.lc_clip * w), hi + self.lc_clip * w)
                    self.ranges[k].push(self.pushed, x, self.history)
                    if self.sorted: self.sorted[k].push(self.pushed, x, self.history)
                self.pushed += 1
            self.pending = []
        if self.open is None or self.open.get('absorbed') or self.learning:
            self.pending = []
            for k in self._extra(used):
                if k == 3 and not season_ok: continue
                self.ranges[k].push(self.pushed, views[k], self._cap(k))
                if self.pushed < self.warmup:
                    wl, wh = self.wext.get(k, (views[k], views[k])); self.wext[k] = (min(wl, views[k]), max(wh, views[k]))
                if self.sorted: self.sorted[k].push(self.pushed, views[k], self.history)
                if self.tailq and k in self.tail_views: self._tail_push(k, views[k])
            if used == 4 and season_ok: self.npushed_season += 1
            self.pushed += 1
        return score

    def _cap(self, k=0):
        """forget_warm (lab): once forget_warm x the warm-up has been pushed, the range no longer holds the
        warm-up's values (a start-up transient)."""
        if self._forgets_warmup(k):
            return max(1, min(self.history, self.pushed - self.warmup + 1))
        return self.history

    def _forgets_warmup(self, k):
        return bool(self.forget_warm) and k in self.fw_views and self.pushed >= self.forget_warm * self.warmup

    def _extra(self, used):
        return list(range(used)) + ([4] if self.long_bins else []) + ([5] if self.mad_bins else []) + ([6] if (self.dq_bins or self.trim_view) else [])

    def _confirmed(self, score):
        """gate_h (gate.py): a finding is reported only once its score passes gate_hi or a second view's
        recent score (self.ext, set by the caller before add) passes gate_h."""
        return self.gate_h is None or score > self.gate_hi or getattr(self, 'ext', 0.0) > self.gate_h

    def _override(self):
        """The excess that opens a finding during a cool-down: override_abs range widths (the C++), or, where None
        (the detector before the tolerant day view), override thresholds."""
        return self.override_abs if self.override_abs is not None else self.override * self.threshold

    def _tail_push(self, k, v):
        import bisect
        if not hasattr(self, 'tails_init'): self.tails_init = True
        q, srt = self.tails.setdefault(k, (deque(), []))
        q.append(v); bisect.insort(srt, v)
        if len(q) > self.history:
            o = q.popleft(); del srt[bisect.bisect_left(srt, o)]

    def _seasonal_bounds(self, b):
        """What this time of day has seen: per previous day d (1..sg_days) the min/max of the values within sg_w bins of
        the same time; aggregated over the days (max: seen on any day; median; min: seen on every day)."""
        los = []; his = []
        for d in range(1, self.sg_days + 1):
            c = b - d * self.season
            vals = [self.pastd[j][1] for j in range(c - self.sg_w, c + self.sg_w + 1) if j in self.pastd]
            if vals: los.append(min(vals)); his.append(max(vals))
        if not his: return None
        los.sort(); his.sort()
        if self.sg_agg == 'max': return (los[0], his[-1])
        if self.sg_agg == 'min':
            return (los[-1], his[0]) if len(his) == self.sg_days else None
        if len(his) < self.sg_days: return None
        return (los[len(los) // 2], his[len(his) // 2])

    def close(self):
        if self.open is None: return
        if self.cd_close >= 0: self.cd = min(self.cd, self.cd_close)
        if self.cd_after_close and not (self.yielded is not None): self.cd = max(self.cd, self.cooldown)  # lab: the cool-down also runs from the close
        if self.ret_guard and self.returned: self.guard = self.ret_guard
        o = self.open
        held_before, self.yielded = self.yielded, None
        if held_before is not None and o['reported'] is None and not o.get('absorbed') and not self.learning:
            # yield_resume: the departure the held finding yielded to ended unreported (noise within the shift)
            self._give_back(held_before)
            return
        if self.season > 0 and not o['absorbed'] and not self.learning and self.last_bin + 1 >= o['first'] + self.short:
            idx = self.pastd
            for p in self.past:
                if p[0] < o['first'] or p[0] < self.season: continue
                q = idx.get(p[0] - self.season)
                if q is not None: p[1] = q[1]
        if self.last_value_bin is not None and self.last_value_bin >= o['first']: o['last'] = self.last_value_bin
        if not o.get('listed'): self.spans.append(o)
        self.open = None; self.last_value_bin = None; self.learning = False
        if (held_before is not None and self.yield_resume in (2, 3) and not o.get('absorbed') and
                self._out_ref(0, self.cur_value, held_before[1])):
            # yield_resume=2: a reported departure inside a held shift is a finding of its own; the shift goes on
            for vv in self.fpending:
                for k in self.fmem_views: self.franges[k].push(self.nb, vv[k], self.fmem)
            self.fpending = []
            span, ref, held, at = held_before
            span['listed'] = True
            self.open = span; self.learning = True; self.ref = ref; self.held = held + (self.nb - at)

    def _give_back(self, held_before):
        span, ref, held, at = held_before
        if not span.get('listed'):  # listed: it stayed where it was when a reported departure gave it back before
            assert self.spans and self.spans[-1] is span
            self.spans.pop()
        self.open = span; self.learning = True; self.ref = ref; self.held = held + (self.nb - at)
        self.fpending = []; self.last_value_bin = None

    def finish(self):
        self.yielded = None
        self.close()
