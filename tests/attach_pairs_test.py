"""bench/overhead/attach_pairs.py: the whole recording's cost inside one job process (record --pid alternated with
gaps). Split: constructed steps whose cost is known (slower while a recorder is attached, slower still while it
starts and detaches, which must count in neither group). EndToEnd: run_overhead.sh --attach-pairs briefly on the
CPU launch-bound workload, with the probe check; needs root, the stackscope binary ($STACKSCOPE, ctest sets it)
and a python with torch (run_overhead.sh finds one); skipped otherwise. Registered with ctest
(tests/CMakeLists.txt: overhead_attach_pairs)."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
sys.path.insert(0, os.path.join(ROOT, "bench", "overhead"))
import attach_pairs  # noqa: E402

S = 1_000_000_000
BASE = 0.001     # a step without a recorder, seconds
ATTACHED = 1.04  # a step while the probes are in
BUSY = 1.50      # a step while the recorder starts (reads the libraries' symbols) or detaches


def build_run(configs, gap=3.0, duration=4.0, startup=0.6, detach=0.4, t0=1000 * S):
    """Steps back to back from t0: gap, recording, gap, recording, ..., gap. Each recording: the recorder's launch,
    `startup` s of its start-up (BUSY steps), then its probes in for `duration` s (ATTACHED steps, the first torch
    window at once, its first detach 0.2 s later), then `detach` s of release (BUSY). Returns the steps, the
    alternations as attach_pairs.main builds them and the gaps (from each recorder gone to the next launch)."""
    plan, t = [], t0
    for c in configs:
        launch = t + int(gap * S)
        start = launch + int(startup * S)  # the recording's start_ns, the probes in at once
        end = start + int(duration * S)    # the recording's end_ns (writer closed; probes still in)
        gone = end + int(detach * S)
        plan.append((c, launch, start, end, gone))
        t = gone
    t_stop = t + int(gap * S)
    steps, t = [], t0
    while t < t_stop:
        d = BASE
        for _, launch, start, end, gone in plan:
            if launch <= t < start or end <= t < gone:
                d = BASE * BUSY
            elif start <= t < end:
                d = BASE * ATTACHED
        steps.append((t, d, d * 0.9))  # the job's CPU a step: 90 % of its wall time
        t += int(d * S)
    alts, gaps, prev = [], [], t0
    for c, launch, start, end, gone in plan:
        flips = {"torch": [(start, 1.0), (start + int(0.2 * S), 0.0), (end, 0.0)]}
        span = attach_pairs.recording_span(start, end, flips, 0.5, 0.3)
        alts.append({"config": c, "span": span, "steady_from": attach_pairs.steady_start(flips, end, 0.3)})
        gaps.append((prev + int(0.5 * S), launch))
        prev = gone
    gaps.append((prev + int(0.5 * S), t_stop))
    return steps, alts, gaps


class Split(unittest.TestCase):
    def test_cost_is_the_constructed_one(self):
        steps, alts, gaps = build_run(["default", "nvml,host", "nvml,host", "default"])
        per, null = attach_pairs.split_alternations(steps, alts, gaps)
        self.assertEqual([r["config"] for r in per], ["default", "nvml,host", "nvml,host", "default"])
        for r in per:
            self.assertNotIn("error", r)
            # Start-up and release steps (BUSY) are in neither group: the cost is the attached steps' exactly.
            self.assertAlmostEqual(r["cost"], ATTACHED - 1.0, places=9)
            self.assertAlmostEqual(r["cost_median_step"], ATTACHED - 1.0, places=9)
            self.assertAlmostEqual(r["cost_cpu"], ATTACHED - 1.0, places=9)
            self.assertAlmostEqual(r["cost_steady"], ATTACHED - 1.0, places=9)
            self.assertAlmostEqual(r["span_s"], 4.0 - 0.5 - 0.3, places=6)
            self.assertGreater(r["steps_attached"], 2500)
        self.assertEqual(null["wall"], [0.0] * 4)  # every gap holds BASE steps only
        self.assertEqual(null["median"], [0.0] * 4)
        rows, noise = attach_pairs.summarise_costs(per, null)
        self.assertEqual([r["config"] for r in rows], ["default", "nvml,host"])
        self.assertEqual(rows[0]["cost"]["n"], 2)
        self.assertAlmostEqual(rows[0]["cost"]["median"], ATTACHED - 1.0, places=9)
        self.assertEqual(noise["wall"]["median_abs"], 0.0)

    def test_gaps_start_after_the_release(self):
        # A gap counted from the recording's end (not from the recorder gone, plus the margin) takes the release's
        # BUSY steps as detached ones: the baseline rises and the cost reads low.
        steps, alts, gaps = build_run(["default"])
        wide = [gaps[0]] + [(a - int(0.9 * S), b) for a, b in gaps[1:]]
        per, _ = attach_pairs.split_alternations(steps, alts, wide)
        self.assertLess(per[0]["cost"], ATTACHED - 1.0 - 0.001)

    def test_span_and_steady_start(self):
        flips = {"torch": [(5 * S, 1.0), (6 * S, 0.0), (10 * S, 1.0), (11 * S, 0.0), (20 * S, 0.0)],
                 "cuda": [(7 * S, 1.0), (20 * S, 0.0)]}  # cuda never cycled: its only 0 is the stop's
        self.assertEqual(attach_pairs.recording_span(4 * S, 20 * S, flips, 1.0, 0.5), (8 * S, int(19.5 * S)))
        self.assertEqual(attach_pairs.recording_span(4 * S, 20 * S, {}, 1.0, 0.5), (5 * S, int(19.5 * S)))
        self.assertEqual(attach_pairs.steady_start(flips, 20 * S, 0.3), int(6.3 * S))
        self.assertIsNone(attach_pairs.steady_start({"cuda": flips["cuda"]}, 20 * S, 0.3))

    def test_whole_periods(self):
        # torch: full attachment from 5 s; cycling from 5.1 s, its first window the tail of the full attachment
        # (detach 5.3 s), then a 0.2 s window every 2 s from 7.1 s; cuda cycles earlier.
        torch = [(5 * S, 1.0), (int(5.3 * S), 0.0)]
        for k in range(6):
            torch += [(int(7.1 * S) + 2 * k * S, 1.0), (int(7.3 * S) + 2 * k * S, 0.0)]
        flips = {"torch": torch + [(20 * S, 0.0)], "cuda": [(5 * S, 1.0), (int(5.1 * S), 0.0), (20 * S, 0.0)]}
        falls = attach_pairs.detaches(flips, 20 * S)
        self.assertEqual(falls["cuda"], [int(5.1 * S)])
        self.assertEqual(len(falls["torch"]), 7)  # the last window's detach at 17.3 s, before the stop's 0
        # From torch's first detach (+0.3) to its last detach that fits by 16 s (+0.3): 5.6 .. 15.6 s, five periods.
        self.assertEqual(attach_pairs.whole_periods_end(flips, 20 * S, 16 * S, 0.3), int(15.6 * S))
        # Counted from steady_from even where the attached span starts later (whole periods).
        self.assertEqual(attach_pairs.steady_whole_span((6 * S, 16 * S), int(5.6 * S), flips, 20 * S, 0.3),
                         (int(5.6 * S), int(15.6 * S)))
        # No later detach fits: no whole period (a too short recording), where the family cycled.
        self.assertIsNone(attach_pairs.steady_whole_span((6 * S, 7 * S), int(5.6 * S), flips, 20 * S, 0.3))
        # Nothing cycled (nvml,host): the whole span.
        self.assertEqual(attach_pairs.steady_whole_span((6 * S, 16 * S), None, {}, 20 * S, 0.3), (6 * S, 16 * S))

    def test_precise_estimates(self):
        configs = ["default", "nvml,host"] * 4
        steps, alts, gaps = build_run(configs)
        for x in alts:  # no whole period in build_run's flips: take the attached span
            x["steady_span"] = x["span"]
        rows, gap_segs = attach_pairs.precise_estimates(steps, alts, gaps, ["default", "nvml,host"], 0.02)
        self.assertEqual(len(gap_segs), len(configs) + 1)
        for r in rows:
            self.assertEqual(r["alternations"], 4)
            self.assertEqual(r["no_whole_period"], 0)
            self.assertAlmostEqual(r["interval"]["mean"], ATTACHED - 1.0, places=9)
            self.assertAlmostEqual(r["cpu_interval"]["mean"], ATTACHED - 1.0, places=9)
            self.assertEqual(r["verdict"], "> 2 % shown")  # 4 % exactly, no noise
            self.assertAlmostEqual(r["null_interval"]["mean"], 0.0, places=12)
        alts[0]["steady_span"] = None
        rows, _ = attach_pairs.precise_estimates(steps, alts, gaps, ["default"], 0.02)
        self.assertEqual(rows[0]["no_whole_period"], 1)
        self.assertEqual(rows[0]["interval"]["n"], 3)
        # Two runs (lanes) pooled: their alternations together, each run's null with them.
        pooled = attach_pairs.pool([{"precise": rows}, {"precise": rows}], 0.02)
        self.assertEqual(pooled[0]["alternations"], 8)  # 2 without a whole period: not in the interval
        self.assertEqual(pooled[0]["interval"]["n"], 6)
        self.assertEqual(pooled[0]["no_whole_period"], 2)
        self.assertEqual(len(pooled[0]["null_contrasts"]), 2 * len(rows[0]["null_contrasts"]))
        self.assertAlmostEqual(pooled[0]["interval"]["mean"], ATTACHED - 1.0, places=9)

    def test_too_few_steps(self):
        steps, alts, gaps = build_run(["default"])
        alts[0]["span"] = (alts[0]["span"][0], alts[0]["span"][0] + 10_000)  # 10 us: no whole step inside
        per, _ = attach_pairs.split_alternations(steps, alts, gaps)
        self.assertIn("error", per[0])
        self.assertNotIn("cost", per[0])


STACKSCOPE = os.environ.get("STACKSCOPE", "")


@unittest.skipUnless(os.geteuid() == 0 and os.access(STACKSCOPE, os.X_OK), "needs root and $STACKSCOPE")
class EndToEnd(unittest.TestCase):
    def test_cpu_launch_bound(self):
        # Small shapes (0.6 ms a step on the CPU VM); one alternation per configuration, short recordings: the split
        # is computed, no figure is asserted (the loaded VM's noise is larger than the costs).
        with tempfile.TemporaryDirectory() as out:
            env = dict(os.environ, STACKSCOPE=STACKSCOPE)
            p = subprocess.run(
                ["bash", os.path.join(ROOT, "bench/overhead/run_overhead.sh"), "launch_bound", out, "1",
                 "--attach-pairs", "--duration", "4", "--gap", "3", "--settle", "1",
                 "--configs", "default=;nvml,host=--layers nvml,host", "--check-probes", "--check-s", "2",
                 "--workload-args", "--device cpu --width 32 --depth 4 --batch 4 --warmup 50"],
                capture_output=True, text=True, env=env, timeout=400)
            if "no python with torch found" in p.stderr:
                self.skipTest("no python with torch")
            self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr[-2000:])
            with open(os.path.join(out, "launch_bound.attach.json")) as f:
                s = json.load(f)
            with open(os.path.join(out, "launch_bound.attach.md")) as f:
                md = f.read()
        self.assertEqual([r["config"] for r in s["per_alternation"]], ["default", "nvml,host"])
        for r in s["per_alternation"]:
            self.assertNotIn("error", r)
            self.assertEqual(r["rc"], 0)
            self.assertGreater(r["steps_attached"], 100)
            self.assertGreater(r["steps_detached"], 100)
            self.assertIsInstance(r["cost"], float)
            self.assertIsInstance(r["cost_cpu"], float)
        self.assertEqual(s["per_alternation"][0]["families_watching"], ["torch"])  # the budget's series was read
        self.assertEqual(s["per_alternation"][1]["families_watching"], [])
        self.assertEqual(s["noise"]["wall"]["n"], 2)  # 3 gaps
        for c in s["check_probes"]:
            # record --pid attaches what record -- CMD does: same links (kind, library, probe count), layers
            self.assertTrue(c["same"], c)
        self.assertGreater(sum(s["check_probes"][0]["child"]["links"].values()), 100)  # torch's uprobes
        self.assertIn("| default |", md)
        # The precise estimate: a 4 s recording holds no whole 5 s budget period (default is left out of it, and
        # says so); nvml,host cycles nothing and takes its whole span. One alternation each: no interval.
        rows = {r["config"]: r for r in s["precise"]}
        self.assertEqual(rows["default"]["no_whole_period"], 1)
        self.assertEqual(rows["nvml,host"]["no_whole_period"], 0)
        self.assertIsInstance(rows["nvml,host"]["contrasts"][0], float)
        self.assertTrue(rows["default"]["verdict"].startswith("not shown either way"))
        for r in s["per_alternation"]:
            self.assertGreater(r["attach_s"], 0.0)  # launch -> probes in
            self.assertGreaterEqual(r["gone_s"], r["exit_s"])
        self.assertIn("Precise estimate", md)


if __name__ == "__main__":
    unittest.main()
