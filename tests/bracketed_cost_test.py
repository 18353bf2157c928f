"""bench/overhead/bracketed_cost.py, attach_pairs.py's precise estimator, on constructed held steps: a job whose
step time drifts linearly (+30 % over the run) and wanders from second to second, a recorder that costs a known 3 %
while attached. The bracketed contrasts recover the 3 % within their interval where the pooled ratio (every
attached step against every gap step) is off by the drift; the null (gaps only) reads ~0. Registered with ctest
(tests/CMakeLists.txt: overhead_bracketed_cost)."""
import math
import os
import random
import statistics
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bench", "overhead"))
import bracketed_cost as bc  # noqa: E402

S = 1_000_000_000
BASE = 0.002  # s a step at the run's start


def build(cost, alternations=60, gap=2.0, attached=3.0, dead=1.0, drift=0.30, wander=0.02, jitter=0.10, seed=3,
          front_loaded=False):
    """Steps back to back: gap, dead time (attach), attached, dead time (detach), gap, ... The step time is
    BASE x (1 + drift x t / T) x (1 + a level redrawn every second, sd `wander`) x (1 + per-step noise, sd
    `jitter`), x (1 + cost) while attached. front_loaded: the attached span sits early in its alternation (its
    mid-time is not halfway between the gaps' mid-times). Returns steps, the attached (t0, t1) spans and the gaps."""
    rng = random.Random(seed)
    cycle = gap + 2 * dead + attached
    total = alternations * cycle + gap
    spans, gaps, t = [], [], 0.0
    for _ in range(alternations):
        gaps.append((t, t + gap))
        a0 = t + gap + (dead * 0.2 if front_loaded else dead)
        spans.append((a0, a0 + attached))
        t += cycle
    gaps.append((t, t + gap))
    level, next_redraw, steps, now = 1.0, 0.0, [], 0.0
    si = 0
    while now < total:
        if now >= next_redraw:
            level, next_redraw = 1.0 + rng.gauss(0, wander), next_redraw + 1.0
        while si < len(spans) and now >= spans[si][1]:
            si += 1
        on = si < len(spans) and spans[si][0] <= now < spans[si][1]
        d = BASE * (1 + drift * now / total) * level * max(0.2, 1 + rng.gauss(0, jitter)) * (1 + cost if on else 1)
        steps.append((int(now * S), d, d * 0.95))
        now += d
    def ns(pairs):
        return [(int(a * S), int(b * S)) for a, b in pairs]
    return steps, ns(spans), ns(gaps)


def run(steps, spans, gaps, target=0.02):
    return bc.estimate([bc.segment(steps, a, b) for a, b in spans], [bc.segment(steps, a, b) for a, b in gaps],
                       target)


class Estimator(unittest.TestCase):
    def test_recovers_a_known_cost_under_drift(self):
        steps, spans, gaps = build(0.03)
        est = run(steps, spans, gaps)
        iv = est["interval"]
        self.assertEqual(iv["n"], 60)
        lo, hi = iv["ci"]
        self.assertLess(lo, 0.03)
        self.assertGreater(hi, 0.03)
        self.assertLess(hi - lo, 0.02)  # 60 alternations of 2 % second-to-second wander: about +-0.6 %
        self.assertLess(iv["ci_boot"][0], 0.03)
        self.assertGreater(iv["ci_boot"][1], 0.03)
        self.assertEqual(est["verdict"], "> 2 % shown")
        # The null reads no cost where there is none.
        nv = est["null_interval"]
        self.assertEqual(nv["n"], 59)
        self.assertLess(abs(nv["mean"]), 0.01)
        self.assertLess(nv["ci"][0], 0.0)
        self.assertGreater(nv["ci"][1], 0.0)

    def test_drift_cancels_where_pooling_does_not(self):
        # The attached span early in each alternation: pooled gaps (their mean sits later) read the drift as a
        # saving; the line through the neighbouring gaps at the span's own mid-time does not.
        steps, spans, gaps = build(0.0, drift=3.0, wander=0.0, jitter=0.02, alternations=20, front_loaded=True)
        est = run(steps, spans, gaps)
        bracketed = abs(est["interval"]["mean"])
        self.assertLess(bracketed, 0.002)
        gap_steps = [st for a, b in gaps for st in steps if a <= st[0] and st[0] + int(st[1] * S) <= b]
        att_steps = [st for a, b in spans for st in steps if a <= st[0] and st[0] + int(st[1] * S) <= b]
        pooled = statistics.fmean(st[1] for st in att_steps) / statistics.fmean(st[1] for st in gap_steps) - 1
        self.assertGreater(abs(pooled), max(0.005, 4 * bracketed))

    def test_no_cost_is_shown_small(self):
        steps, spans, gaps = build(0.0, seed=5)
        est = run(steps, spans, gaps)
        self.assertEqual(est["verdict"], "<= 2 % shown")
        self.assertLess(est["interval"]["ci"][0], 0.0)

    def test_too_noisy_is_not_shown(self):
        steps, spans, gaps = build(0.02, alternations=6, wander=0.10, seed=7)
        est = run(steps, spans, gaps)
        self.assertEqual(est["verdict"], "not shown either way")

    def test_verdict_bounds(self):
        self.assertEqual(bc.verdict([-0.01, 0.02], 0.02), "<= 2 % shown")
        self.assertEqual(bc.verdict([0.021, 0.05], 0.02), "> 2 % shown")
        self.assertEqual(bc.verdict([0.0, 0.03], 0.02), "not shown either way")
        self.assertTrue(bc.verdict(None, 0.02).startswith("not shown either way"))

    def test_interval(self):
        # Student's t quantiles against the table.
        for dof, t in ((3, 3.182), (10, 2.228), (30, 2.042), (100, 1.984)):
            self.assertAlmostEqual(bc.t_quantile(0.975, dof), t, delta=0.01)
        self.assertIsNone(bc.interval([0.1, None, 0.2]))
        xs = [0.01, 0.03, 0.02, 0.04, 0.00]
        iv = bc.interval(xs)
        logs = [math.log1p(x) for x in xs]
        # The geometric mean of the ratios, less 1 (on the log scale; a hair under the plain mean's 2 %).
        self.assertAlmostEqual(iv["mean"], math.expm1(statistics.fmean(logs)), places=12)
        self.assertLess(iv["mean"], 0.02)
        self.assertGreater(iv["mean"], 0.0199)
        # The lag-1 autocovariance here is negative: the plain standard error, never a smaller one.
        self.assertAlmostEqual(iv["se"], statistics.stdev(logs) / 5 ** 0.5, places=12)
        self.assertLess(iv["ci"][0], iv["mean"])
        self.assertGreater(iv["ci"][1], iv["mean"])

    def test_logs_tame_a_skewed_null(self):
        # Gaps whose mean step is log-normal, no recorder anywhere: the ratio to a noisy reference is skewed
        # upwards, the geometric mean is not.
        rng = random.Random(11)
        gaps = [{"n": 100, "mean": math.exp(rng.gauss(0, 0.4)), "mean_cpu": None, "t_mid": i * S} for i in range(400)]
        ns = bc.null_contrasts(gaps)
        self.assertGreater(statistics.fmean(ns), 0.05)  # the plain mean of the ratios reads a cost
        iv = bc.interval(ns)
        self.assertLess(abs(iv["mean"]), 0.05)
        self.assertLess(iv["ci"][0], 0.0)
        self.assertGreater(iv["ci"][1], 0.0)
        # Positively correlated neighbours widen the interval: a slow wave over the contrasts.
        wave = [0.02 * ((i // 4) % 2) for i in range(40)]
        shuffled = wave[:]
        random.Random(1).shuffle(shuffled)
        self.assertGreater(bc.interval(wave)["se"], bc.interval(shuffled)["se"])

    def test_segments_and_missing(self):
        steps = [(i * S // 1000, 0.001, None) for i in range(5000)]  # 1 ms steps, no CPU time
        seg = bc.segment(steps, 1 * S, 2 * S)
        self.assertEqual(seg["n"], 1000)
        self.assertIsNone(seg["mean_cpu"])
        self.assertIsNone(bc.segment(steps, 10 * S, 11 * S))
        # A missing attached span or gap leaves its alternation out, not the others.
        gaps = [bc.segment(steps, a * S, (a + 1) * S) for a in (0, 2, 4)]
        cs = bc.contrasts([bc.segment(steps, 1 * S, 2 * S), None], gaps)
        self.assertAlmostEqual(cs[0], 0.0)
        self.assertIsNone(cs[1])
        self.assertEqual(bc.contrasts([bc.segment(steps, 1 * S, 2 * S)], [None, gaps[1]]), [None])


if __name__ == "__main__":
    unittest.main()
