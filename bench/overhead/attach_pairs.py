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

import overhead_rounds as orr

# ---------------------------------------------------------------- pure: the split (tests/overhead_split_test.py)


def recording_span(start_ns, end_ns, flips, attach_margin_s, detach_margin_s):
    """(first, last) ns of the steps that count as attached: from when every family with a watching series had its
    first probes in (or the recording's start) plus the margin, to the recording's end less the margin."""
    firsts = [min(t for t, x in pts if x >= 0.5) for pts in flips.values() if any(x >= 0.5 for _, x in pts)]
    probes_in = max([start_ns] + firsts)
    return probes_in + int(attach_margin_s * 1e9), end_ns - int(detach_margin_s * 1e9)


def steady_start(flips, end_ns, detach_margin_s, stop_s=1.0):
    """When the budget's start-up full attachment is over: each cycled family's first detach (a 0 more than stop_s
    before the recording's end, which the recorder's own stop writes) plus the margin; None where no family cycled
    (every family attached throughout, or no budget series)."""
    firsts = []
    for pts in flips.values():
        pts = sorted(pts)
        on = False
        for t, x in pts:
            if x >= 0.5:
                on = True
            elif on and t < end_ns - int(stop_s * 1e9):
                firsts.append(t)
                break
    return max(firsts) + int(detach_margin_s * 1e9) if firsts else None


def steps_within(steps, t0, t1):
    """The steps [(start ns, wall s, CPU s)] that start at t0 or later and end by t1."""
    return [st for st in steps if st[0] >= t0 and st[0] + int(st[1] * 1e9) <= t1]


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


def markdown(s):
    lines = [f"### {s['workload']}: attach/detach alternations in one process ({s['machine']})", "",
             f"`record --pid PID --duration {s['duration_s']:g}` alternated with {s['gap_s']:g} s gaps, "
             f"{s['alternations']} per configuration; margins: attach {s['attach_margin_s']:g} s, detach "
             f"{s['detach_margin_s']:g} s, gap {s['gap_margin_s']:g} s. Workload args `{s['workload_args']}`; "
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
    errs = [x.get("error") for x in s["per_alternation"] if x.get("error")]
    if errs:
        lines += ["", "Errors: " + " / ".join(str(e)[-200:] for e in errs[:3])]
    return "\n".join(lines) + "\n"

# ---------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", required=True, choices=sorted(w for w, v in orr.WORKLOADS.items() if v[1]))
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
    orr.add_run_args(ap)
    ap.add_argument("--configs", default="default=",
                    help="';'-separated NAME=RECORD ARGS (e.g. 'default=;nvml,host=--layers nvml,host'); "
                         "'bare' is the gaps and is ignored here")
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
    a, rest = ap.parse_known_args()
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
        spans.append({"config": r["config"], "span": span,
                      "steady_from": steady_start(r["flips"], r["end_ns"], a.detach_margin)})
    per_alt, null = split_alternations(steps, spans, gaps)
    for p, r, sp, gb, ga in zip(per_alt, alts, spans, gaps, gaps[1:]):
        p.update({"span_ns": sp["span"], "steady_from_ns": sp["steady_from"], "gap_before_ns": gb, "gap_after_ns": ga,
                  "t_launch_ns": r["t_launch_ns"], "t_gone_ns": r["t_gone_ns"]})
        p.update({k: r.get(k) for k in ("alternation", "rc", "links", "recorder_cpu_pct", "events_by_layer",
                                        "stderr_tail", "notes") if r.get(k) is not None})
        p["error"] = p.get("error") or r.get("error")
        if p["error"] is None:
            del p["error"]
        p["families_watching"] = sorted(r.get("flips") or {})
    rows, noise = summarise_costs(per_alt, null)
    s.update({"steps_held": len(steps), "rows": rows, "noise": noise, "per_alternation": per_alt,
              "mean_step_detached_s": orr.med(x.get("mean_detached_s") for x in per_alt)})
    with open(base + ".json", "w") as f:
        json.dump(s, f, indent=1, default=str)
    if a.keep_steps:  # every held step, to split again (split_alternations) with other margins
        with lzma.open(base + ".steps.json.xz", "wt") as f:
            json.dump(steps, f)
    with open(base + ".md", "w") as f:
        f.write(markdown(s))
    print(markdown(s))
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
