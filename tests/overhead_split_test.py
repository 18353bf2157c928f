"""bench/overhead/overhead_rounds.py's in-run cost split (split_steps) on constructed runs whose true cost is known:
steps of a fixed time, slower wherever a duty-cycled family's probes could trap (its windows, their attach and
detach edges, and the entry-only windows the watching series does not show). Registered with ctest
(tests/CMakeLists.txt: overhead_split); runs anywhere python3 runs, no root, no GPU. RealRecording reads a kept
recording with the stackscope binary that $STACKSCOPE names (ctest sets it; skipped without)."""
import json
import lzma
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "overhead"))
import overhead_rounds  # noqa: E402

MS = 1_000_000
BASE = 0.010  # a step without probes, seconds
SLOW = 1.30   # a step that probes trap in


def build_run(seconds=30.0, t0=100_000 * MS, startup_until=5.0, period=5.0, window=0.065, attach=0.016,
              detach=0.114, entry_only=True):
    """Steps back to back from t0 for `seconds`; the cuda family fully attached until startup_until (s after t0),
    then a counted window every 2 periods with, when entry_only, an entry-only window (probes trapping, series 0)
    in between, as the torch calibration alternates them; nccl attached throughout (its only 0 is the recording's
    stop). Returns steps [(start ns, s)] and the series."""
    probed = [(t0 - 3000 * MS, t0 + int((startup_until + detach) * 1e9))]  # when probes can trap
    series = {"cuda": [(t0 - 3000 * MS, 1.0), (t0 + int(startup_until * 1e9), 0.0)],
              "nccl": [(t0 - 2000 * MS, 1.0)]}
    k, start = 0, startup_until + period
    while start < seconds + period:
        a = t0 + int(start * 1e9)
        if k % 2 == 0:  # counted: the series says 1 once attached and 0 before the links go
            series["cuda"] += [(a, 1.0), (a + int(window * 1e9), 0.0)]
            probed.append((a - int(attach * 1e9), a + int((window + detach) * 1e9)))
        elif entry_only:
            probed.append((a - int(attach * 1e9), a + int((window + detach) * 1e9)))
        k += 1
        start += period
    steps, t = [], t0
    end = t0 + int(seconds * 1e9)
    while t < end:
        d = BASE
        if any(a < t + int(BASE * 1e9) and b > t for a, b in probed):
            d = BASE * SLOW
        steps.append((t, d))
        t += int(d * 1e9)
    stop = t + 500 * MS  # the recorder's stop closes every attached family's series after the job's steps
    series["cuda"].append((stop, 0.0))
    series["nccl"].append((stop, 0.0))
    return steps, series


def true_cost(steps, out):
    """The steady section's mean step against the unprobed step, from where split_steps says it starts."""
    start = steps[0][0] + out["first_detach_after_first_step_s"] * 1e9
    steady = [d for s, d in steps if s >= start]
    return sum(steady) / len(steady) / BASE - 1.0


class SplitSteps(unittest.TestCase):
    def test_family_attached_until_the_stop_splits_nothing(self):
        # The GPU runs' symptom: nccl's series is 1 over every step and 0 only at the stop; counted as cycled, it
        # made every step watched (steps_unwatched 0 in every round).
        steps, series = build_run()
        out = overhead_rounds.split_steps(steps, series, {"cuda": (16.0, 114.0)})
        self.assertEqual(out["families_cycled"], ["cuda"])
        self.assertEqual(out["attached_throughout"], ["nccl"])
        self.assertGreater(out["steps_unwatched"], 0.8 * out["steps_steady"])

    def test_cost_is_the_constructed_one(self):
        steps, series = build_run()
        out = overhead_rounds.split_steps(steps, series, {"cuda": (16.0, 114.0)})
        self.assertNotIn("split_error", out)
        # No probed step counted clean: the clean mean is the unprobed step exactly, so the cost is exact.
        self.assertAlmostEqual(out["mean_step_unwatched_s"], BASE, places=12)
        self.assertAlmostEqual(out["probe_cost"], true_cost(steps, out), places=9)
        self.assertAlmostEqual(out["cost_watched"] + out["cost_edge"], out["probe_cost"], places=12)
        self.assertAlmostEqual(out["per_step_cost_watched"], SLOW - 1.0, places=9)
        self.assertGreater(out["steps_watched"], 0)
        self.assertGreater(out["steps_edge"], 0)  # the detach edges and the entry-only windows
        # The start-up attachment (5 s of 30) is left out of the steady section.
        self.assertAlmostEqual(out["steps_startup"] / out["steps_timed"], 5.0 / 30 / SLOW * 1.0, delta=0.03)
        self.assertGreater(out["probe_cost_se"], 0.0)

    def test_edges_from_the_notes(self):
        # Without the recorder's detach time the default margin (250 ms) still covers a 114 ms detach.
        steps, series = build_run()
        out = overhead_rounds.split_steps(steps, series, {})
        self.assertAlmostEqual(out["probe_cost"], true_cost(steps, out), places=9)
        note = ("cuda: probes watched 47.0% of the recording since they were first attached (3 window(s), cost budget; "
                "attach 16.2 ms, detach 114.0 ms per window; last period 5000 ms; ...")
        self.assertEqual(overhead_rounds.toggle_times([note, "torch: other"]), {"cuda": (16.2, 114.0)})

    def test_timed_steps_inside_the_startup_attachment(self):
        # A timed section shorter than the budget's first detach: nothing to split, and it says so.
        steps, series = build_run(seconds=4.0, startup_until=5.0)
        out = overhead_rounds.split_steps(steps, series, {"cuda": (16.0, 114.0)})
        self.assertIn("split_error", out)
        self.assertNotIn("probe_cost", out)
        self.assertEqual(out["attached_throughout"], ["cuda", "nccl"])

    def test_no_clean_step(self):
        # Windows that cover the steady section leave no clean step: an error, not a cost of 0.
        steps, series = build_run(seconds=12.0, period=0.1, window=0.05)
        out = overhead_rounds.split_steps(steps, series, {"cuda": (16.0, 114.0)})
        self.assertIn("split_error", out)
        self.assertNotIn("probe_cost", out)

    def test_pairs_and_verdict(self):
        rounds = [[{"config": "bare", "ok": True, "median_step_s": 0.010},
                   {"config": "default", "ok": True, "median_step_s": 0.0105}],
                  [{"config": "default", "ok": True, "median_step_s": 0.0099},
                   {"config": "bare", "ok": True, "median_step_s": 0.011}]]
        pairs = overhead_rounds.pair_overheads(rounds, "default")
        self.assertAlmostEqual(pairs[0], 0.05)
        self.assertAlmostEqual(pairs[1], -0.1)
        self.assertAlmostEqual(overhead_rounds.spread([0.010, 0.011]), 0.0005 / 0.0105)
        v = overhead_rounds.verdict({"pair_overheads": pairs, "per_round_probe_cost": [0.004, None, 0.006],
                                     "probe_cost_se": 0.001}, 0.05)
        self.assertEqual(v["source"], "in-run split")
        self.assertAlmostEqual(v["cost"], 0.005)
        v = overhead_rounds.verdict({"pair_overheads": pairs, "per_round_probe_cost": [None]}, 0.05)
        self.assertEqual(v["source"], "pairs")
        self.assertAlmostEqual(v["cost"], -0.025)


DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "overhead")


@unittest.skipUnless(os.access(os.environ.get("STACKSCOPE", ""), os.X_OK), "STACKSCOPE names no stackscope binary")
class RealRecording(unittest.TestCase):
    def test_torch_attached_through_the_steps(self):
        # `record` (default) of tiny_ops_cpu.py --size 512 --chain 1 --steps 300 (CPU VM, torch 1.13): 150 operator
        # calls/s, too few for the budget to cycle the torch family, so its series is 1 from its first probes and 0
        # only at the recorder's stop, after the job's steps. Read as a cycle, that last 0 would make every step
        # watched (steps_unwatched 0 of 300), as on the H200 runs with nccl.
        ss = os.environ["STACKSCOPE"]
        with tempfile.TemporaryDirectory() as work:
            rec = os.path.join(work, "rec.sdb")
            with lzma.open(os.path.join(DATA, "torch_attached_throughout.sdb.xz")) as src, open(rec, "wb") as dst:
                shutil.copyfileobj(src, dst)
            with lzma.open(os.path.join(DATA, "torch_attached_throughout.steps.json.xz")) as f:
                steps = json.load(f)
            flips = overhead_rounds.watching_series(ss, rec, work)
            self.assertEqual(sorted(flips), ["torch"])
            self.assertEqual([x for _, x in flips["torch"]], [1.0, 0.0])
            self.assertGreater(flips["torch"][-1][0], steps[-1][0])  # the 0 comes after the last step: the stop
            info = json.loads(subprocess.run([ss, "info", "--json", rec], capture_output=True, text=True,
                                             check=True).stdout)
            out = overhead_rounds.watched_split(ss, rec, steps, work, [n.get("text", "") for n in info["notes"]])
        self.assertEqual(out["attached_throughout"], ["torch"])
        self.assertEqual(out["families_cycled"], [])
        self.assertEqual(out["steps_timed"], 300)
        self.assertIn("split_error", out)
        self.assertNotIn("probe_cost", out)


if __name__ == "__main__":
    unittest.main()
