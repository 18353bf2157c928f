"""The whole recording's cost inside ONE job process: the workload steps without end (step_rounds.py --hold
--time-held) and the harness alternates `stackscope record --pid PID --duration D` (attach, record D s, detach)
with gaps of G s without a recorder, K times per configuration (configurations interleaved, the order flipped every
alternation). run_overhead.sh --attach-pairs is the entry point.

Why: fresh-process pairs (overhead_rounds.py) compare two processes, and bare runs alone spread +-10-15 % between
processes on the GPU host (6.45-8.16 ms a launch-bound step), more than a 2 % target; the in-run split there only
sees the duty-cycled windows. Here every always-on part (the recorder's threads, NVML and procfs sampling, the
steady CUDA probes on blocking calls, kernel tracepoints, the Python stack sampler) is in or out as a whole, and
attached steps are compared with detached steps of the same process, its clocks, caches and allocator state.

Per alternation:
  attached  the steps fully inside [probes in + attach margin, recording end - detach margin]: probes in is the
            recording's start or, later, the first 1 of every trace.<family>.watching series (a family's first
            probes); the recording ends (writer closed) before any probe is released, so its end bounds the span
  detached  the steps fully inside the gaps before and after it: [previous recorder gone + gap margin, next
            recorder started]; "gone" is the recorder's exit (or its background detacher's, where it printed one)
            and the harness's reading of the recording after it
  cost      mean(attached) / mean(detached) - 1; the median over a configuration's alternations, with min-max;
            beside it the same with median steps, with the job's CPU time a step (probe traps are the job's
            system time), and by third of the span (a start-up transient shows in the first third only)
  steady    the same from each cycled family's first detach on (the budget's start-up full attachment left out):
            what a long recording costs once the budget cycles
  noise     each gap's mean against the next gap's (no recorder in either): the in-process floor, to set beside
            the bare runs' spread in run_overhead.sh's fresh-process mode
  precise   the verdict on the <= 2 % cost target (bracketed_cost.py): each alternation's steady span cut to whole
            duty-cycle periods (from the last cycled family's first detach to a later detach of it, both plus the
            margin: a long recording's share of budget windows, not one window or none by chance), against the line
            through the gaps before and after it at the span's mid-time (slow drift cancels); the geometric mean
            over the alternations with a 95 % t-interval (lag-1 counted) and a block bootstrap; the same estimator
            on each gap against its neighbours is the null (the method's false offset); the verdict "<= T shown"
            only where the upper bound is <= T (--target, 2 %). Also per alternation: launch -> probes in, the
            budget's first look, recording end -> recorder exit / probes gone / recording read (how short an
            alternation can be). Configuration `sham=`: an A/A alternation, no recorder, the last real one's
            timeline (recording times and watching series) replayed, so its spans and gaps have the real geometry.
            Known bias: one period holds torch's first calibration window (short and counted) where a long
            recording averages 8 kinds, so torch's window cost reads ~0.7x: <= 0.2 % low on the launch-bound job.
--combine A.json B.json ... --out DIR pools the precise estimates of several runs (lanes: a job each).
--check-probes [CONFIG] first runs each configuration (or the one named) with --budget 0 (every probe attached
throughout) once as `record -- JOB` and once as `record --pid` on the held job, and compares the BPF links the
recorder held (their kind, library and probe count, from /proc/PID/fdinfo), the layers that recorded events and the
series subsystems.

Writes OUT/WORKLOAD.attach.json and OUT/WORKLOAD.attach.md. Needs root (the recorder's uprobes)."""
import argparse
import json
import lzma
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import bracketed_cost as bc
import overhead_rounds as orr

# ---------------------------------------------------------------- pure: the split (tests/overhead_split_test.py)


def recording_span(start_ns, end_ns, flips, attach_margin_s, detach_margin_s):
    """(first, last) ns of the steps that count as attached: from when every family with a watching series had its
    first probes in (or the recording's start) plus the margin, to the recording's end less the margin."""
    firsts = [min(t for t, x in pts if x >= 0.5) for pts in flips.values() if any(x >= 0.5 for _, x in pts)]
    probes_in = max([start_ns] + firsts)
    return probes_in + int(attach_margin_s * 1e9), end_ns - int(detach_margin_s * 1e9)


def detaches(flips, end_ns, stop_s=1.0):
    """{family: [ns of each detach]} of the families that cycled: a watching series' falls from 1 to 0 more than
    stop_s before the recording's end (the 0 the recorder's own stop writes is no duty-cycle detach)."""
    out = {}
    for fam, pts in flips.items():
        on, falls = False, []
        for t, x in sorted(pts):
            if x >= 0.5:
                on = True
            elif on:
                on = False
                if t < end_ns - int(stop_s * 1e9):
                    falls.append(t)
        if falls:
            out[fam] = falls
    return out


def steady_start(flips, end_ns, detach_margin_s, stop_s=1.0):
    """When the budget's start-up full attachment is over: each cycled family's first detach (a 0 more than stop_s
    before the recording's end, which the recorder's own stop writes) plus the margin; None where no family cycled
    (every family attached throughout, or no budget series)."""
    falls = detaches(flips, end_ns, stop_s)
    return max(f[0] for f in falls.values()) + int(detach_margin_s * 1e9) if falls else None


def whole_periods_end(flips, end_ns, end_limit_ns, margin_s, stop_s=1.0):
    """Where the steady span ends so that it holds whole duty-cycle periods: it starts at the last family's first
    detach plus the margin (steady_start) and ends at that family's last later detach plus the same margin, by
    end_limit_ns. From one detach to a later one is whole periods (each an off time and a window), so the span holds
    the share of watched time a long recording has; from the first detach to the recording's end holds either no
    window or one cut short, by where the end falls (a 5 s period against a 6-8 s recording). None where no family
    cycled or no later detach of it fits."""
    falls = detaches(flips, end_ns, stop_s)
    if not falls:
        return None
    last = max(falls.values(), key=lambda f: f[0])
    m = int(margin_s * 1e9)
    fits = [t + m for t in last[1:] if t + m <= end_limit_ns]
    return fits[-1] if fits else None


def steps_within(steps, t0, t1):
    """The steps [(start ns, wall s, CPU s)], in time order, that start at t0 or later and end by t1."""
    return bc.steps_in(steps, t0, t1)


def ratio(a, b, i=1):
    """mean of field i (1 wall, 2 CPU) of steps a over that of steps b, less 1; None where either is empty."""
    xa, xb = [st[i] for st in a if st[i] is not None], [st[i] for st in b if st[i] is not None]
    return statistics.fmean(xa) / statistics.fmean(xb) - 1.0 if xa and xb and statistics.fmean(xb) > 0 else None


def median_ratio(a, b):
    """median wall step of a over that of b, less 1: on a loaded machine the mean carries its stalls."""
    return statistics.median(st[1] for st in a) / statistics.median(st[1] for st in b) - 1.0


def split_alternations(steps, alts, gaps, min_steps=20):
    """Per alternation {cost (wall), cost_median_step, cost_cpu, cost_steady, step counts}, and the gaps' null
    comparisons (each gap's mean step against the next gap's).

    steps: [(start ns, wall s, CPU s or None)]; alts: [{"config", "span": (a, b), "steady_from": ns or None}] in
    time order; gaps: [(a, b)], gap i before alternation i and gap i+1 after it (len(alts) + 1). Pure: the unit
    test feeds it constructed steps."""
    in_gap = [steps_within(steps, a, b) for a, b in gaps]
    out = []
    for i, alt in enumerate(alts):
        a, b = alt["span"]
        att = steps_within(steps, a, b)
        det = in_gap[i] + in_gap[i + 1]
        r = {"config": alt["config"], "steps_attached": len(att), "steps_detached": len(det),
             "span_s": max(0.0, (b - a) / 1e9)}
        if len(att) < min_steps or len(det) < min_steps:
            r["error"] = f"{len(att)} attached, {len(det)} detached steps (need {min_steps} each)"
            out.append(r)
            continue
        r["mean_attached_s"] = statistics.fmean(st[1] for st in att)
        r["mean_detached_s"] = statistics.fmean(st[1] for st in det)
        r["cost"] = ratio(att, det)
        r["cost_median_step"] = median_ratio(att, det)
        r["cost_cpu"] = ratio(att, det, 2)
        # Where in the span the cost sits: a start-up transient shows in the first third only.
        r["cost_thirds"] = [ratio(steps_within(steps, a + (b - a) * j // 3, a + (b - a) * (j + 1) // 3), det)
                            for j in range(3)]
        if alt.get("steady_from") is not None:
            steady = steps_within(steps, max(a, alt["steady_from"]), b)
            r["steps_steady"] = len(steady)
            if len(steady) >= min_steps:
                r["cost_steady"] = ratio(steady, det)
        out.append(r)
    pairs = [(in_gap[j + 1], in_gap[j]) for j in range(len(in_gap) - 1)
             if len(in_gap[j]) >= min_steps and len(in_gap[j + 1]) >= min_steps]
    null = {"wall": [ratio(x, y) for x, y in pairs], "median": [median_ratio(x, y) for x, y in pairs],
            "cpu": [ratio(x, y, 2) for x, y in pairs]}
    return out, {k: [x for x in v if x is not None] for k, v in null.items()}


def summarise_costs(per_alt, null):
    """Per configuration: median cost over its alternations and their min-max; the gaps' null spread."""
    rows = {}
    for r in per_alt:
        rows.setdefault(r["config"], []).append(r)
    out = []
    for name, rs in rows.items():
        def stat(key):
            xs = [r[key] for r in rs if r.get(key) is not None]
            return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs),
                    "values": xs} if xs else None
        out.append({"config": name, "alternations": len(rs), "cost": stat("cost"),
                    "cost_median_step": stat("cost_median_step"), "cost_cpu": stat("cost_cpu"),
                    "cost_steady": stat("cost_steady"),
                    "cost_thirds": [orr.med(r["cost_thirds"][j] for r in rs if r.get("cost_thirds")) for j in range(3)],
                    "errors": sorted({r["error"] for r in rs if r.get("error")})[:3]})
    nulls = {k: {"median_abs": statistics.median(abs(x) for x in v), "min": min(v), "max": max(v), "n": len(v),
                 "values": v} for k, v in null.items() if v}
    return out, nulls

def steady_whole_span(span, steady_from, flips, end_ns, margin_s):
    """The attached span the precise estimate takes: from the budget's first detach plus the margin (steady_from) to
    whole duty-cycle periods after it (whole_periods_end); the whole span where no family cycled (nvml,host: nothing to
    exclude); None where a family cycled but no whole period fits (the recording is too short)."""
    if steady_from is None:
        return span
    end = whole_periods_end(flips, end_ns, span[1], margin_s)
    # From steady_from itself, not the attached span's start where that is later: whole periods are counted from
    # the first detach (steady_from is after the probes were in and after the start-up full attachment anyway).
    return (steady_from, end) if end is not None and end > steady_from else None


def precise_estimates(steps, alts, gaps, names, target):
    """Per configuration, bracketed_cost's estimate: each alternation's steady whole-period span against the gaps
    before and after it (wall time; the job's CPU time beside it), the same with the whole attached span (the
    budget's start-up full attachment in), and the null on the gaps. alts: [{"config", "span", "steady_span"}] in
    time order, gaps as split_alternations takes them. Pure."""
    gap_segs = [bc.segment(steps, a, b) for a, b in gaps]
    steady = [bc.segment(steps, *x["steady_span"]) if x.get("steady_span") else None for x in alts]
    whole = [bc.segment(steps, *x["span"]) if x["span"][1] > x["span"][0] else None for x in alts]
    null_cpu = bc.null_contrasts(gap_segs, "mean_cpu")
    out = []
    for name in names:
        def mine(segs):
            return [sg if x["config"] == name else None for sg, x in zip(segs, alts)]

        def own(cs):
            return [c for c, x in zip(cs, alts) if x["config"] == name]
        est = bc.estimate(mine(steady), gap_segs, target)
        est["contrasts"] = own(est["contrasts"])
        cpu = own(bc.contrasts(mine(steady), gap_segs, "mean_cpu"))
        span = own(bc.contrasts(mine(whole), gap_segs))
        est.update({"config": name, "alternations": len(est["contrasts"]),
                    "no_whole_period": sum(1 for sg, x in zip(steady, alts) if x["config"] == name and sg is None),
                    "cpu_contrasts": cpu, "cpu_interval": bc.interval(cpu),
                    "span_contrasts": span, "span_interval": bc.interval(span),
                    "null_cpu_contrasts": null_cpu, "null_cpu_interval": bc.interval(null_cpu)})
        out.append(est)
    return out, gap_segs

# ---------------------------------------------------------------- the recorder's links (--check-probes)


def link_summary(pid):
    """{'KIND LIBRARY': probes} over the BPF links `pid` holds (its fdinfo: uprobe_multi links name their library
    and probe count; other kinds are counted), or None where its fds cannot be read."""
    try:
        fds = os.listdir(f"/proc/{pid}/fdinfo")
    except OSError:
        return None
    out = {}
    for fd in fds:
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                text = f.read()
        except OSError:
            continue
        if "link_id:" not in text:
            continue
        kind = re.search(r"^link_type:\s*(\S+)", text, re.M)
        path = re.search(r"^path:\s*(\S+)", text, re.M)
        cnt = re.search(r"^uprobe_cnt:\s*(\d+)", text, re.M)
        key = (kind.group(1) if kind else "?") + ("" if not path else " " + os.path.basename(path.group(1)))
        out[key] = out.get(key, 0) + (int(cnt.group(1)) if cnt else 1)
    return out


def watch_links(pid, stop, into):
    """Keeps the largest link summary of `pid` seen until stop is set (families attach over the first seconds)."""
    while not stop.wait(0.25):
        s = link_summary(pid)
        if s is not None and ("links" not in into or sum(s.values()) > sum(into["links"].values())):
            into["links"] = s

# ---------------------------------------------------------------- the held job and the recorder


class HeldJob:
    """The workload stepping without end, its stdout read on a thread (HOLDING, then HELD at SIGINT)."""
    live = set()  # started and not yet stopped: main kills them if the harness is stopped (timeout's SIGTERM)

    def __init__(self, cmd, errlog, prefix=None):
        with open(errlog, "w") as err:
            self.proc = subprocess.Popen((prefix or []) + cmd, stdout=subprocess.PIPE, stderr=err, text=True,
                                         cwd=orr.ROOT, start_new_session=True)
        HeldJob.live.add(self)
        self.holding = threading.Event()
        self.held = None
        self.t_holding = None
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            if line.strip() == "HOLDING":
                self.t_holding = time.monotonic_ns()
                self.holding.set()
            elif line.startswith("HELD "):
                self.held = json.loads(line[5:])

    def wait_holding(self, timeout):
        end = time.monotonic() + timeout
        while not self.holding.wait(0.2):
            if self.proc.poll() is not None or time.monotonic() > end:
                return False
        return True

    def stop(self, sig=signal.SIGINT, timeout=60):
        """SIGINT (the job prints HELD and exits), then its steps [(start ns, wall s, CPU s)]."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            orr.kill_group(self.proc)
            self.proc.wait()
        self.reader.join(timeout=10)
        HeldJob.live.discard(self)
        h = self.held or {}
        starts, walls = h.get("step_start_ns", []), h.get("step_s", [])
        return list(zip(starts, walls, h.get("step_cpu_s") or [None] * len(walls)))


def job_command(a):
    script, holds, _ = orr.WORKLOADS[a.workload]
    if not holds:
        raise SystemExit(f"{a.workload}: its script does not hold (step_rounds.py workloads only)")
    return ([a.python, os.path.join(orr.ROOT, script[0])] + script[1:] + shlex.split(a.workload_args) +
            ["--rounds", "0", "--hold", "--time-held"])


def record_info(stackscope, rec, workdir):
    """start/end ns, layers with events, notes, the recorder's CPU and the watching series of a recording."""
    info = json.loads(subprocess.run([stackscope, "info", "--json", rec], capture_output=True, text=True,
                                     timeout=120).stdout)
    cost = json.loads(info.get("meta", {}).get("recorder_cpu", "null") or "null") or {}
    return {"start_ns": info["start_ns"], "end_ns": info["end_ns"],
            "events_by_layer": info.get("events_by_layer", {}),
            "series_by_subsystem": info.get("series_by_subsystem", {}),
            "notes": [n.get("text", "")[:400] for n in info.get("notes", [])][:16],
            "recorder_cpu_pct": 100.0 * cost["cpu_s"] / cost["wall_s"] if cost.get("wall_s") else None,
            "flips": orr.watching_series(stackscope, rec, workdir)}


def attach_once(a, pid, rec_args, rec, duration, watch=False):
    """`record --pid PID --duration D`: launch and exit times (monotonic ns), when its probes were gone, its
    largest link summary while it ran (watch), rc and the end of its stderr."""
    for p in (rec, rec + "-wal", rec + "-shm"):
        if os.path.exists(p):
            os.remove(p)
    cmd = [a.stackscope, "record", "--pid", str(pid), "--duration", str(duration), *rec_args,
           *shlex.split(a.record_args), "-o", rec]
    res = {"cmd": shlex.join(cmd), "t_launch_ns": time.monotonic_ns()}
    seen, stop = {}, threading.Event()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    watcher = threading.Thread(target=watch_links, args=(p.pid, stop, seen), daemon=True) if watch else None
    if watcher:
        watcher.start()
    try:
        _, err = p.communicate(timeout=duration + a.timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
        res["error"] = f"recorder still running {duration + a.timeout:.0f} s after its launch"
    stop.set()
    res["t_exit_ns"] = time.monotonic_ns()
    res["rc"], res["stderr_tail"] = p.returncode, err[-600:]
    if p.returncode and "error" not in res:  # its recording may be partial or missing: the alternation says so
        res["error"] = f"recorder exit status {p.returncode}: {err[-300:]}"
    m = re.search(r"detached in the background \(pid (\d+)\)", err)
    if m:  # the probes go when the detacher exits
        helper, end = int(m.group(1)), time.monotonic() + a.timeout
        while orr.pid_alive(helper) and time.monotonic() < end:
            time.sleep(0.02)
    res["t_gone_ns"] = time.monotonic_ns()
    if watcher:
        watcher.join(timeout=2)
        res["links"] = seen.get("links")
    return res

SHAM = "sham"  # the A/A configuration: no recorder, the last real alternation's timeline replayed


def sham_once(alts):
    """An alternation with no recorder (configuration `sham`): sleeps as long as the last real alternation took from
    launch to gone, and takes its recording times and watching series shifted to now, so its attached span, steady
    span and gaps have the real ones' geometry. Its cost is what the estimator reads where the truth is 0."""
    t = time.monotonic_ns()
    real = next((r for r in reversed(alts) if r["config"] != SHAM and "start_ns" in r), None)
    if real is None:
        time.sleep(1.0)
        return {"t_launch_ns": t, "t_exit_ns": time.monotonic_ns(), "t_gone_ns": time.monotonic_ns(), "rc": 0,
                "error": "sham: no real alternation before it to copy"}
    shift = t - real["t_launch_ns"]
    out = {"t_launch_ns": t, "rc": 0, "start_ns": real["start_ns"] + shift, "end_ns": real["end_ns"] + shift,
           "flips": {f: [(x + shift, v) for x, v in pts] for f, pts in real["flips"].items()}}
    time.sleep(max(0.0, (real["t_gone_ns"] - real["t_launch_ns"]) / 1e9))
    out["t_exit_ns"] = out["t_gone_ns"] = time.monotonic_ns()
    return out

# ---------------------------------------------------------------- --check-probes


def recorded_what(stackscope, rec, work):
    """The layers with events and the series subsystems a recording holds (what its probes and samplers saw)."""
    try:
        info = record_info(stackscope, rec, work)
    except (OSError, subprocess.SubprocessError, json.JSONDecodeError, KeyError) as e:
        return {"error": str(e)}
    return {"layers": sorted(k for k, v in info["events_by_layer"].items() if v),
            "subsystems": sorted(k for k, v in info["series_by_subsystem"].items() if v)}


def check_probes(a, configs, work):
    """Per configuration, with --budget 0 (no duty cycle: every probe stays attached): the links of
    `record -- JOB` and of `record --pid` on the same workload, and what each recorded."""
    out = []
    rec = os.path.join(work, "check.sdb")
    errlog = os.path.join(work, "check.job.log")
    for name, args in configs:
        args = [*args, "--budget", "0"]
        # as a child: the recorder starts the job, which holds; the recorder's links once the job steps
        for p in (rec, rec + "-wal", rec + "-shm"):
            if os.path.exists(p):
                os.remove(p)
        prefix = [a.stackscope, "record", *args, *shlex.split(a.record_args), "-q", "-o", rec, "--"]
        job = HeldJob(job_command(a), errlog, prefix)
        child = {"links": None}
        if job.wait_holding(a.timeout):
            seen, stop = {}, threading.Event()
            w = threading.Thread(target=watch_links, args=(job.proc.pid, stop, seen), daemon=True)
            w.start()
            time.sleep(a.check_s)
            stop.set()
            w.join()
            child["links"] = seen.get("links")
        job.stop()  # the recorder passes SIGINT to the job and ends with it
        child.update(recorded_what(a.stackscope, rec, work))
        # by PID: the held job first, then the recorder attached to it
        job = HeldJob(job_command(a), errlog)
        attached = {"links": None}
        if job.wait_holding(a.timeout):
            attached["links"] = attach_once(a, job.proc.pid, args, rec, a.check_s + 2, watch=True).get("links")
            attached.update(recorded_what(a.stackscope, rec, work))
        job.stop()
        same = child["links"] is not None and all(child.get(k) == attached.get(k)
                                                  for k in ("links", "layers", "subsystems"))
        out.append({"config": name, "record_args": shlex.join(args), "child": child, "pid": attached,
                    "same": same})
        print(json.dumps({"check_probes": name, "same": same, "child": child, "pid": attached}), flush=True)
    return out

# ---------------------------------------------------------------- report


def fmt_stat(s):
    if not s:
        return "-"
    return f"**{orr.fmt_pct(s['median'])}** ({orr.fmt_pct(s['min'])} .. {orr.fmt_pct(s['max'])}, n {s['n']})"


def fmt_ci(iv):
    if not iv:
        return "-"
    return (f"**{orr.fmt_pct(iv['mean'])}** [{orr.fmt_pct(iv['ci'][0])}, {orr.fmt_pct(iv['ci'][1])}] "
            f"(bootstrap [{orr.fmt_pct(iv['ci_boot'][0])}, {orr.fmt_pct(iv['ci_boot'][1])}], n {iv['n']})")


def precise_markdown(s):
    """The precise estimate's table and verdicts (bracketed_cost.py), with how long attaching and detaching took."""
    rows = s.get("precise") or []
    if not rows:
        return []
    lines = ["", f"Precise estimate (bench/overhead/bracketed_cost.py): each alternation's steady span (from the "
                 f"budget's first detach + {s['detach_margin_s']:g} s, whole duty-cycle periods) against the line "
                 f"through the gaps before and after it; geometric mean of the alternations' ratios, 95 % t-interval "
                 f"on their logs (lag-1 autocovariance counted) and moving-block bootstrap. Null: each gap against "
                 f"the line through its neighbours (no recorder in any of the three).", "",
             "| config | alternations | cost, steady whole periods: mean [95 % CI] | job CPU per step | whole span "
             "(start-up look in) | sd per alternation | lag-1 corr | verdict (target "
             f"{orr.fmt_pct(rows[0]['target'], False)}) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        iv = r.get("interval") or {}
        lag = iv.get("lag1_corr")
        short = f" ({r['no_whole_period']} without a whole period)" if r.get("no_whole_period") else ""
        lines.append(f"| {r['config']} | {r['alternations']}{short} | {fmt_ci(r.get('interval'))} | "
                     f"{fmt_ci(r.get('cpu_interval'))} | {fmt_ci(r.get('span_interval'))} | "
                     f"{orr.fmt_pct(iv.get('sd'), False)} | {'-' if lag is None else f'{lag:+.2f}'} | "
                     f"{r['verdict']} |")
    nv, ncpu = rows[0].get("null_interval"), rows[0].get("null_cpu_interval")
    lines += ["", f"Null (gaps only, the method's false offset): wall {fmt_ci(nv)}; job CPU {fmt_ci(ncpu)}."]
    alts = [x for x in s["per_alternation"] if x.get("attach_s") is not None and x.get("config") != SHAM]
    if alts:
        def m(k):
            return orr.med(x.get(k) for x in alts)
        fl = m("first_look_s")
        look = "-" if fl is None else f"{fl:.2f} s"
        lines.append(f"Attach and detach (medians of {len(alts)} recordings): launch -> probes in "
                     f"{m('attach_s'):.2f} s; probes in -> the budget's first detach {look}; recording end -> "
                     f"recorder exit {m('exit_s'):.2f} s, -> probes gone {m('gone_s'):.2f} s; reading the recording "
                     f"(info, export) {m('read_s') or 0:.2f} s. "
                     f"{s.get('alternations_done', len(s['per_alternation']))} alternations in "
                     f"{s.get('wall_s', 0):.0f} s.")
    for r in rows:
        if r["config"] == SHAM:  # no recorder: its cost is the method's false offset, its verdict says nothing
            lines.append(f"\nA/A ({SHAM}: no recorder, the last real timeline replayed): {fmt_ci(r.get('interval'))}.")
        else:
            lines.append(f"\n**Verdict, {r['config']}: {r['verdict']}** (steady cost {fmt_ci(r.get('interval'))}; "
                         f"null {fmt_ci(nv)}).")
    return lines


def pool(runs, target):
    """One precise estimate a configuration over several runs' (each a job of its own: lanes on other GPUs):
    their contrasts and null contrasts, each run's in time order, one run after the other."""
    names = []
    for s in runs:
        names += [r["config"] for r in s.get("precise") or [] if r["config"] not in names]
    def nulls(key):
        return [c for s in runs for c in ((s.get("precise") or [{}])[0].get(key) or [])]
    null, null_cpu = nulls("null_contrasts"), nulls("null_cpu_contrasts")
    rows = []
    for name in names:
        def gather(key):
            return [c for s in runs for r in s.get("precise") or [] if r["config"] == name for c in r.get(key) or []]
        cs = gather("contrasts")
        iv = bc.interval(cs)
        rows.append({"config": name, "target": target, "alternations": len(cs), "contrasts": cs, "interval": iv,
                     "verdict": bc.verdict(iv["ci"] if iv else None, target),
                     "no_whole_period": sum(r.get("no_whole_period", 0) for s in runs for r in s.get("precise") or []
                                            if r["config"] == name),
                     "cpu_contrasts": gather("cpu_contrasts"), "cpu_interval": bc.interval(gather("cpu_contrasts")),
                     "span_contrasts": gather("span_contrasts"),
                     "span_interval": bc.interval(gather("span_contrasts")),
                     "null_contrasts": null, "null_interval": bc.interval(null),
                     "null_cpu_contrasts": null_cpu, "null_cpu_interval": bc.interval(null_cpu)})
    return rows


def combine(paths, out, target):
    runs = []
    for p in paths:
        with open(p) as f:
            runs.append(json.load(f))
    s = {"combined": paths, "machines": sorted({r.get("machine", "?") for r in runs}),
         "precise": pool(runs, target), "per_alternation": [], "detach_margin_s": runs[0]["detach_margin_s"],
         "alternations_done": sum(r.get("alternations_done", 0) for r in runs),
         "wall_s": max(r.get("wall_s", 0) for r in runs),
         "per_run": [{"path": p, "machine": r.get("machine"), "precise": [
             {k: x.get(k) for k in ("config", "interval", "verdict", "null_interval")} for x in r.get("precise") or []]}
             for p, r in zip(paths, runs)]}
    lines = [f"### Precise estimate pooled over {len(runs)} runs ({'; '.join(s['machines'])})", "",
             "Runs: " + "; ".join(f"{p}: " + ", ".join(f"{x['config']} {fmt_ci(x['interval'])}" for x in r["precise"])
                                  for p, r in zip(paths, s["per_run"])) + "."]
    md = "\n".join(lines + precise_markdown(s)) + "\n"
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "combined.attach.json"), "w") as f:
        json.dump(s, f, indent=1, default=str)
    with open(os.path.join(out, "combined.attach.md"), "w") as f:
        f.write(md)
    print(md)
    return 0


def markdown(s):
    lines = [f"### {s['workload']}: attach/detach alternations in one process ({s['machine']})", "",
             f"`record --pid PID --duration {s['duration_s']:g}` alternated with {s['gap_s']:g} s gaps, "
             f"{s.get('alternations_done', s['alternations'])} alternations in all; margins: attach "
             f"{s['attach_margin_s']:g} s, detach {s['detach_margin_s']:g} s, gap {s['gap_margin_s']:g} s. "
             f"Workload args `{s['workload_args']}`; "
             f"{s['steps_held']} held steps, bare mean {orr.fmt_s(s.get('mean_step_detached_s'))}.", "",
             "| config | cost: mean(attached) / mean(detached) - 1, median (min .. max) | median-step ratio | "
             "job CPU per step | steady (after the budget's first detach) | by third of the span (medians) | "
             "attached steps a span | recorder CPU | events by layer |", "|---|---|---|---|---|---|---|---|---|"]
    for r in s["rows"]:
        alts = [x for x in s["per_alternation"] if x["config"] == r["config"]]
        att = orr.med(x.get("steps_attached") for x in alts)
        cpu = orr.med(x.get("recorder_cpu_pct") for x in alts)
        layers = next((x.get("events_by_layer") for x in reversed(alts) if x.get("events_by_layer")), {}) or {}
        lay = ", ".join(f"{k} {v}" for k, v in sorted(layers.items()) if v) or "-"
        lines.append(f"| {r['config']} | {fmt_stat(r['cost'])} | {fmt_stat(r['cost_median_step'])} | "
                     f"{fmt_stat(r['cost_cpu'])} | {fmt_stat(r['cost_steady'])} | "
                     f"{', '.join(orr.fmt_pct(x) for x in r['cost_thirds'])} | {'-' if att is None else int(att)} | "
                     f"{'-' if cpu is None else f'{cpu:.1f} %'} | {lay} |")
    noise = s.get("noise") or {}
    if noise:
        lines += ["", "Noise in the process, each gap's mean step against the next gap's (no recorder in either): " +
                  "; ".join(f"{what} median |x| {orr.fmt_pct(n['median_abs'], False)}, range {orr.fmt_pct(n['min'])}"
                            f" .. {orr.fmt_pct(n['max'])}" for what, n in
                            (("mean", noise.get("wall")), ("median step", noise.get("median")),
                             ("job CPU", noise.get("cpu"))) if n) +
                  f" ({noise['wall']['n'] if noise.get('wall') else 0} gap pairs)."]
    for c in s.get("check_probes") or []:
        verdict = "the same" if c["same"] else "**NOT the same**"
        lines += ["", f"Probes, {c['config']} (`{c['record_args']}`): `record --pid` and `record -- JOB` attach "
                      f"{verdict} (BPF links by kind and library: probes; layers with events; series subsystems): "
                      f"-- JOB {c['child'].get('links')}, {c['child'].get('layers')}, "
                      f"{c['child'].get('subsystems')}; --pid {c['pid'].get('links')}, {c['pid'].get('layers')}, "
                      f"{c['pid'].get('subsystems')}."]
    lines += precise_markdown(s)
    errs = [x.get("error") for x in s["per_alternation"] if x.get("error")]
    if errs:
        lines += ["", "Errors: " + " / ".join(str(e)[-200:] for e in errs[:3])]
    return "\n".join(lines) + "\n"

# ---------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", choices=sorted(w for w, v in orr.WORKLOADS.items() if v[1]),
                    help="required unless --combine")
    ap.add_argument("--out", required=True, help="directory for WORKLOAD.attach.json and WORKLOAD.attach.md")
    ap.add_argument("--rounds", type=int, default=3, help="alternations per configuration")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds each recording lasts (record --duration)")
    ap.add_argument("--gap", type=float, default=5.0, help="seconds without a recorder between recordings")
    ap.add_argument("--attach-margin", type=float, default=1.0,
                    help="seconds after the probes are in before attached steps count")
    ap.add_argument("--detach-margin", type=float, default=0.3,
                    help="seconds before the recording's end (and after a family's first detach) left out")
    ap.add_argument("--gap-margin", type=float, default=0.5,
                    help="seconds after the recorder is gone before detached steps count")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds of held steps before the first gap counts")
    ap.add_argument("--target", type=float, default=0.02,
                    help="the cost the precise estimate's verdict is stated against (0.02: the 2 %% target)")
    orr.add_run_args(ap)
    ap.add_argument("--configs", default="default=",
                    help="';'-separated NAME=RECORD ARGS (e.g. 'default=;nvml,host=--layers nvml,host'); "
                         "'bare' is the gaps and is ignored here; 'sham=' is an A/A alternation: no recorder, the "
                         "last real one's timeline replayed (the precise estimate's false offset)")
    ap.add_argument("--check-probes", nargs="?", const="all", default=None, metavar="CONFIG",
                    help="first compare the links of `record -- JOB` and `record --pid` (--budget 0, --check-s "
                         "seconds each) for every configuration, or for the one named")
    ap.add_argument("--check-s", type=float, default=6.0)
    ap.add_argument("--timeout", type=float, default=120, help="seconds to wait for the job's HOLDING, a "
                                                                 "recorder's exit past its duration")
    ap.add_argument("--budget-s", type=float, default=0,
                    help="wall seconds for the whole run (probe check included): no recording starts that would "
                         "not end, with the last gap, within them")
    ap.add_argument("--keep-steps", action="store_true",
                    help="write every held step [start ns, wall s, CPU s] to OUT/WORKLOAD.attach.steps.json.xz")
    ap.add_argument("--keep-recordings", action="store_true",
                    help="copy each configuration's last recording to OUT/WORKLOAD.attach.CONFIG.sdb")
    ap.add_argument("--combine", nargs="+", metavar="JSON",
                    help="no run: pool the precise estimates of earlier runs' WORKLOAD.attach.json (lanes of one "
                         "command, each its own job) into OUT/combined.attach.{md,json}")
    a, rest = ap.parse_known_args()
    if a.combine:
        return combine(a.combine, a.out, a.target)
    if not a.workload:
        ap.error("--workload is required (unless --combine)")
    if rest:  # run_overhead.sh's options of the fresh-process mode
        ignored = [x for x in rest if x.startswith("--")]
        print(f"attach_pairs: ignoring {' '.join(ignored)}", file=sys.stderr)
    a.stackscope = os.path.abspath(a.stackscope) if os.sep in a.stackscope else a.stackscope
    a.machine = a.machine or f"{platform.node()}, {os.cpu_count()} cores"
    configs = [(n, args) for n, args in orr.parse_configs(a.configs) if args is not None]
    if not configs:
        raise SystemExit("--configs names no recorder configuration")
    os.makedirs(a.out, exist_ok=True)
    base = os.path.join(a.out, a.workload + ".attach")
    t0 = time.monotonic()
    s = {"workload": a.workload, "workload_args": a.workload_args, "record_args": a.record_args,
         "machine": a.machine, "host": platform.node(), "stackscope": a.stackscope, "python": a.python,
         "duration_s": a.duration, "gap_s": a.gap, "alternations": a.rounds, "attach_margin_s": a.attach_margin,
         "detach_margin_s": a.detach_margin, "gap_margin_s": a.gap_margin, "configs": configs}
    with tempfile.TemporaryDirectory(prefix="attach-") as work:
        if a.check_probes:
            checked = [c for c in configs if a.check_probes in ("all", c[0])]
            if not checked:
                raise SystemExit(f"--check-probes {a.check_probes}: no such configuration")
            s["check_probes"] = check_probes(a, checked, work)
        job = HeldJob(job_command(a), os.path.join(work, "job.log"))
        if not job.wait_holding(a.timeout):
            job.stop()
            raise SystemExit("the job never printed HOLDING: " + open(os.path.join(work, "job.log")).read()[-1500:])
        pid = job.proc.pid
        time.sleep(a.settle)
        gone = [job.t_holding + int(a.settle * 1e9)]  # where each gap may start counting (before the margin)
        alts = []
        plan = [(k, c) for k in range(a.rounds) for c in (configs if k % 2 == 0 else list(reversed(configs)))]
        t_alts = time.monotonic()
        for k, (name, args) in plan:
            per = (time.monotonic() - t_alts) / len(alts) if alts else a.gap + a.duration
            if (a.budget_s and time.monotonic() - t0 + per + a.gap > a.budget_s) or job.proc.poll() is not None:
                print(f"stopping after {len(alts)} of {len(plan)} recordings "
                      f"({'the job exited' if job.proc.poll() is not None else 'budget'})", flush=True)
                break
            time.sleep(a.gap)
            rec = os.path.join(work, "rec.sdb")
            if name == SHAM:
                r = sham_once(alts)
                r["config"], r["alternation"] = name, k
                alts.append(r)
                gone.append(time.monotonic_ns())
                continue
            r = attach_once(a, pid, args, rec, a.duration, watch=(k == 0))
            r["config"], r["alternation"] = name, k
            try:
                r.update(record_info(a.stackscope, rec, work))
            except (OSError, subprocess.SubprocessError, json.JSONDecodeError, KeyError) as e:
                r["error"] = r.get("error") or f"info: {e}"
            if a.keep_recordings:
                shutil.copyfile(rec, f"{base}.{re.sub(r'[^A-Za-z0-9_.-]+', '_', name)}.sdb")
            alts.append(r)
            gone.append(time.monotonic_ns())  # after `info` and `export` too: their CPU is no recorder's
            r["t_read_ns"] = gone[-1]
            print(json.dumps({k2: r.get(k2) for k2 in ("config", "alternation", "rc", "links", "error",
                                                        "recorder_cpu_pct")}), flush=True)
        time.sleep(a.gap)
        t_stop = time.monotonic_ns()
        steps = job.stop()
    if not steps:
        raise SystemExit("no HELD line from the job")
    # Gap i runs from the recorder before it gone (+ margin) to the launch of the one after it.
    launches = [r["t_launch_ns"] for r in alts] + [t_stop]
    gaps = [(g + int(a.gap_margin * 1e9), t) for g, t in zip(gone, launches)]
    spans = []
    for r in alts:
        if "start_ns" not in r:
            spans.append({"config": r["config"], "span": (0, 0), "steady_from": None})
            continue
        span = recording_span(r["start_ns"], r["end_ns"], r["flips"], a.attach_margin, a.detach_margin)
        steady_from = steady_start(r["flips"], r["end_ns"], a.detach_margin)
        spans.append({"config": r["config"], "span": span, "steady_from": steady_from,
                      "steady_span": steady_whole_span(span, steady_from, r["flips"], r["end_ns"], a.detach_margin),
                      "probes_in": recording_span(r["start_ns"], r["end_ns"], r["flips"], 0, 0)[0]})
    per_alt, null = split_alternations(steps, spans, gaps)
    precise, gap_segs = precise_estimates(steps, spans, gaps, [n for n, _ in configs], a.target)
    for p, r, sp, gb, ga in zip(per_alt, alts, spans, gaps, gaps[1:]):
        p.update({"span_ns": sp["span"], "steady_from_ns": sp["steady_from"], "gap_before_ns": gb, "gap_after_ns": ga,
                  "t_launch_ns": r["t_launch_ns"], "t_gone_ns": r["t_gone_ns"],
                  "steady_span_ns": sp.get("steady_span")})
        if "start_ns" in r:  # how long attaching and detaching took: what bounds how short an alternation can be
            p["attach_s"] = (sp["probes_in"] - r["t_launch_ns"]) / 1e9  # launch -> probes in
            p["first_look_s"] = (None if sp["steady_from"] is None else
                                 (sp["steady_from"] - sp["probes_in"]) / 1e9 - a.detach_margin)
            p["exit_s"] = (r["t_exit_ns"] - r["end_ns"]) / 1e9  # recording's end -> recorder exited
            p["gone_s"] = (r["t_gone_ns"] - r["end_ns"]) / 1e9  # -> probes gone (a background detacher's exit)
            p["read_s"] = (r["t_read_ns"] - r["t_gone_ns"]) / 1e9 if r.get("t_read_ns") else None  # info, export
        p.update({k: r.get(k) for k in ("alternation", "rc", "links", "recorder_cpu_pct", "events_by_layer",
                                        "stderr_tail", "notes") if r.get(k) is not None})
        p["error"] = p.get("error") or r.get("error")
        if p["error"] is None:
            del p["error"]
        p["families_watching"] = sorted(r.get("flips") or {})
    rows, noise = summarise_costs(per_alt, null)
    s.update({"steps_held": len(steps), "rows": rows, "noise": noise, "per_alternation": per_alt,
              "precise": precise, "gap_segments": gap_segs, "alternations_done": len(alts),
              "wall_s": time.monotonic() - t0,
              "mean_step_detached_s": orr.med(x.get("mean_detached_s") for x in per_alt)})
    with open(base + ".json", "w") as f:
        json.dump(s, f, indent=1, default=str)
    with open(base + ".md", "w") as f:
        f.write(markdown(s))
    print(markdown(s), flush=True)
    if a.keep_steps:  # every held step, to split again (split_alternations) with other margins; last (slowest)
        with lzma.open(base + ".steps.json.xz", "wt") as f:
            json.dump(steps, f)
    return 0


def run_main():
    # A job in its own session outlives its harness: a SIGTERM (timeout) ends the harness through its finally.
    signal.signal(signal.SIGTERM, lambda sig, _: sys.exit(128 + sig))
    try:
        return main()
    finally:
        for job in list(HeldJob.live):
            orr.kill_group(job.proc)


if __name__ == "__main__":
    sys.exit(run_main())
