"""The precise estimator of attach_pairs.py (is the default recording's cost <= 2 %?): each attached
segment against the gaps just before and after it, interpolated to its time, so that the job's slow drift cancels;
a confidence interval over the alternations; the same estimator on the gaps alone (the method's own false offset).

Why: the launch-bound job's mean step wanders 9-13 % from one 4 s gap to the next with no recorder at all (H100 and
H200), so the median of 3 alternations against the pooled gaps showed nothing either way. A linear
interpolation between the neighbouring gaps removes any drift that is linear over one alternation; what is left is
averaged over many short alternations and stated with its interval.

  contrast   alternation i: mean(attached steps) / G(t_i) - 1, G(t) the line through (t, mean) of gap i and gap i+1,
             t_i the attached steps' mid-time
  null       gap j (1 .. n-1): mean(gap j) / (the line through gaps j-1 and j+1 at gap j's mid-time) - 1; no recorder
             is in any of the three, so its mean is what the method reads where the truth is 0 (its spread is a
             little wider than the contrasts': its neighbours are one alternation away, not half)
  interval   95 %, on log(1 + contrast): mean +- t(n-1) x a standard error that counts the correlation of
             neighbouring contrasts (they share a gap: lag-1 autocovariance added, never subtracted); beside it a
             moving-block bootstrap (blocks of 3 alternations) percentile interval; both mapped back (exp - 1), so
             the estimate is the geometric mean of the ratios. Why logs: a ratio to a noisy reference is skewed
             upwards (E[1/x] > 1/E[x]); on the loaded CPU VM the plain mean of the gaps' null ratios read +25 %
  verdict    "<= T shown" if the upper bound <= T, "> T shown" if the lower bound > T, else "not shown either way"

Pure (no I/O): tests/bracketed_cost_test.py feeds it constructed steps."""
import bisect
import math
import random
import statistics

_starts_of = [None, None]  # the last steps list seen and its start times: one bisect a segment, not a scan


def steps_in(steps, t0, t1):
    """The steps [(start ns, wall s, CPU s or None)], in time order, that start at t0 or later and end by t1. A held
    run has 10^5 steps or more (0.6 ms steps on the CPU VM) and ~100 segments: scanning all for each took longer
    than the run's 15 s of slack."""
    if _starts_of[0] is not steps:
        _starts_of[:] = [steps, [st[0] for st in steps]]
    starts = _starts_of[1]
    i, j = bisect.bisect_left(starts, t0), bisect.bisect_right(starts, t1)
    return [st for st in steps[i:j] if st[0] + int(st[1] * 1e9) <= t1]


def segment(steps, t0, t1):
    """{n, mean (wall s), mean_cpu, t_mid ns} of the steps [(start ns, wall s, CPU s or None)] that start at t0 or
    later and end by t1; None where there are none."""
    inside = steps_in(steps, t0, t1)
    if not inside:
        return None
    cpu = [st[2] for st in inside if st[2] is not None]
    return {"n": len(inside), "mean": statistics.fmean(st[1] for st in inside),
            "mean_cpu": statistics.fmean(cpu) if cpu else None,
            "t_mid": (inside[0][0] + inside[-1][0] + int(inside[-1][1] * 1e9)) // 2}


def interpolate(before, after, t, key="mean"):
    """The line through (t_mid, key) of segments before and after, at t."""
    y0, y1 = before[key], after[key]
    if y0 is None or y1 is None:
        return None
    dt = after["t_mid"] - before["t_mid"]
    return y0 if dt <= 0 else y0 + (y1 - y0) * (t - before["t_mid"]) / dt


def _contrast(seg, before, after, key, min_steps):
    if not seg or not before or not after or min(seg["n"], before["n"], after["n"]) < min_steps:
        return None
    ref = interpolate(before, after, seg["t_mid"], key)
    return seg[key] / ref - 1.0 if seg[key] is not None and ref and ref > 0 else None


def contrasts(attached, gaps, key="mean", min_steps=20):
    """Per alternation i (attached[i] between gaps[i] and gaps[i+1], segments as segment() gives them, None where
    missing): its contrast or None."""
    return [_contrast(a, gaps[i], gaps[i + 1], key, min_steps) for i, a in enumerate(attached)]


def null_contrasts(gaps, key="mean", min_steps=20):
    """Gap j against the line through gaps j-1 and j+1, for j = 1 .. len(gaps) - 2 (None where any is missing)."""
    return [_contrast(gaps[j], gaps[j - 1], gaps[j + 1], key, min_steps) for j in range(1, len(gaps) - 1)]


def t_quantile(p, dof):
    """Student's t quantile (Cornish-Fisher expansion about the normal one; within 0.3 % of the table's for
    dof >= 3 at p = 0.975)."""
    z = statistics.NormalDist().inv_cdf(p)
    if dof <= 0:
        return float("inf")
    g1 = (z ** 3 + z) / 4
    g2 = (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96
    g3 = (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / 384
    g4 = (79 * z ** 9 + 776 * z ** 7 + 1482 * z ** 5 - 1920 * z ** 3 - 945 * z) / 92160
    return z + g1 / dof + g2 / dof ** 2 + g3 / dof ** 3 + g4 / dof ** 4


def interval(xs, level=0.95, block=3, resamples=2000, seed=14):
    """{n, mean, se, ci (t), ci_boot, sd, lag1_corr} over the contrasts xs (ratios less 1) in time order (None
    dropped, their order kept), computed on log(1 + x) and mapped back: mean and bounds are ratios less 1, se and
    sd are on the log scale (about relative); None where fewer than 3 remain. The standard error adds the lag-1
    autocovariance when it is positive (neighbouring contrasts share a gap); the bootstrap resamples moving blocks
    of `block` alternations."""
    xs = [math.log1p(x) for x in xs if x is not None and x > -1]
    n = len(xs)
    if n < 3:
        return None
    m = statistics.fmean(xs)
    g0 = sum((x - m) ** 2 for x in xs) / n
    g1 = sum((xs[i] - m) * (xs[i + 1] - m) for i in range(n - 1)) / n
    se = math.sqrt(max(0.0, g0 + 2 * max(0.0, g1)) / (n - 1))
    q = t_quantile(0.5 + level / 2, n - 1)
    rng = random.Random(seed)
    b = max(1, min(block, n // 3))  # at least 3 blocks to draw from
    starts = range(n - b + 1)
    means = []
    for _ in range(resamples):
        pick = []
        while len(pick) < n:
            s = rng.choice(starts)
            pick.extend(xs[s:s + b])
        means.append(statistics.fmean(pick[:n]))
    means.sort()
    lo_i = int((1 - level) / 2 * resamples)
    back = math.expm1
    return {"n": n, "mean": back(m), "se": se, "ci": [back(m - q * se), back(m + q * se)],
            "ci_boot": [back(means[lo_i]), back(means[resamples - 1 - lo_i])], "sd": statistics.stdev(xs),
            "lag1_corr": g1 / g0 if g0 > 0 else None, "level": level, "scale": "log"}


def verdict(ci, target):
    """The question's answer from an interval [lo, hi]: '<= T shown', '> T shown' or 'not shown either way'."""
    if ci is None:
        return "not shown either way (too few alternations)"
    lo, hi = ci
    pct = f"{target * 100:g} %"
    if hi <= target:
        return f"<= {pct} shown"
    if lo > target:
        return f"> {pct} shown"
    return "not shown either way"


def estimate(attached, gaps, target=0.02, key="mean", min_steps=20):
    """The whole estimate for one configuration: contrasts, their interval and verdict, and the null's."""
    cs = contrasts(attached, gaps, key, min_steps)
    ns = null_contrasts(gaps, key, min_steps)
    iv, nv = interval(cs), interval(ns)
    return {"key": key, "target": target, "contrasts": cs, "interval": iv,
            "verdict": verdict(iv["ci"] if iv else None, target), "null_contrasts": ns, "null_interval": nv}
