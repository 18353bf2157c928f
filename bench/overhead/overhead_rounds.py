"""Step-time overhead of `stackscope record` by layer set, in interleaved rounds in one run (run_overhead.sh is
the entry point; see its header). Each round starts the workload once bare and once under each recorder
configuration, a fresh process each; the round order flips every round so drift favours no configuration.

For every traced run it also measures the stop: SIGINT goes to the recorder while the job is still stepping
(workloads of step_rounds.py hold after their timed round), then
  stop_exit_s    SIGINT -> the recorder's exit (the recording is closed and the job has ended),
  probes_gone_s  SIGINT -> the kernel's BPF link and program counts are back to their values before the run
                 and the recorder's background detacher (if it started one) has exited,
and reads the recording's event and drop counts with `stackscope info --json`. Where the workload reports its
step starts (step_rounds.py), split_steps measures the duty-cycled probes' cost inside the run (same process: the
precise figure where fresh-process pairs spread +-10-15 %); the verdict line gives it with the pairs beside it.

Writes OUT/WORKLOAD.json (everything) and OUT/WORKLOAD.md (the table). Needs root for the traced runs."""
import argparse
import ctypes
import csv
import json
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

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))

# name -> (script and its fixed args, holds after its rounds (step_rounds.py), script that prints CALLS or None)
WORKLOADS = {
    "launch_bound": (["bench/overhead/launch_bound.py"], True, None),
    "launch_bound_graph": (["bench/overhead/launch_bound.py", "--cuda-graph"], True, None),
    "small_batch_infer": (["bench/overhead/small_batch_infer.py"], True, None),
    "tiny_ops_cpu": (["bench/overhead/tiny_ops_cpu.py"], True, None),
    # gpt2_overhead.py's worker prints RESULT {"step_s": [...]} and exits; gpt2_calls.py counts its calls.
    "gpt2": (["bench/overhead/gpt2_overhead.py", "--worker"], False, ["bench/overhead/gpt2_calls.py"]),
}

# ---------------------------------------------------------------- kernel state: BPF links and programs


def _bpf_counter():
    nr = {"x86_64": 321, "aarch64": 280}.get(platform.machine())
    if nr is None:
        return None
    libc = ctypes.CDLL(None, use_errno=True)

    def count(cmd):  # BPF_*_GET_NEXT_ID walks the kernel's id table (as bpftool does)
        attr = (ctypes.c_uint32 * 4)()
        n = 0
        while libc.syscall(nr, cmd, ctypes.byref(attr), ctypes.sizeof(attr)) == 0:
            n += 1
            attr[0] = attr[1]  # start_id = next_id
        return n
    return count


_COUNT = _bpf_counter()
BPF_PROG_GET_NEXT_ID, BPF_LINK_GET_NEXT_ID = 11, 31


def kernel_probes():
    """BPF links and programs alive in the kernel, and lines of tracefs uprobe_events (legacy uprobes only)."""
    state = {"links": None, "progs": None, "uprobe_events": None}
    if _COUNT:
        state["links"] = _COUNT(BPF_LINK_GET_NEXT_ID)
        state["progs"] = _COUNT(BPF_PROG_GET_NEXT_ID)
    for p in ("/sys/kernel/tracing/uprobe_events", "/sys/kernel/debug/tracing/uprobe_events"):
        try:
            with open(p) as f:
                state["uprobe_events"] = sum(1 for _ in f)
            break
        except OSError:
            pass
    return state


def links_held_by(pid):
    """BPF links whose file descriptors `pid` holds (its fdinfo names a link_id): what the recorder attached,
    whatever else the machine runs. One per probe with single uprobe links, one per family with uprobe_multi."""
    n = 0
    try:
        fds = os.listdir(f"/proc/{pid}/fdinfo")
    except OSError:
        return None
    for fd in fds:
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                n += "link_id:" in f.read()
        except OSError:
            pass
    return n


def kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def probes_back(now, base):
    return all(now[k] is None or base[k] is None or now[k] <= base[k] for k in now)


def pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True

# ---------------------------------------------------------------- configurations


def record_help(stackscope):
    try:
        return subprocess.run([stackscope, "record", "--help"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def default_configs(help_text):
    """bare; nvml,host; cuda,nccl,nvml,host; default (no --layers); default --detail full where the binary has it."""
    cfgs = [("bare", None), ("nvml,host", ["--layers", "nvml,host"]),
            ("cuda,nccl,nvml,host", ["--layers", "cuda,nccl,nvml,host"]), ("default", [])]
    if re.search(r"--detail\b", help_text):
        cfgs.append(("default --detail full", ["--detail", "full"]))
    return cfgs


def parse_configs(spec):
    """'bare;nvml,host=--layers nvml,host;default=' -> [(name, args or None for bare)]."""
    out = []
    for item in filter(None, (s.strip() for s in spec.split(";"))):
        if item == "bare":
            out.append(("bare", None))
        else:
            name, _, args = item.partition("=")
            out.append((name.strip(), shlex.split(args)))
    return out

# ---------------------------------------------------------------- one run


def parse_line(line):
    for tag in ("RESULT ", "CALLS "):
        if line.startswith(tag):
            try:
                return tag.strip(), json.loads(line[len(tag):])
            except json.JSONDecodeError:
                return None, None
    return ("HOLDING", None) if line.strip() == "HOLDING" else (None, None)


def run_once(a, name, rec_args, workdir, count_calls=False):
    script, holds, _ = WORKLOADS[a.workload]
    job = [a.python] + [os.path.join(ROOT, script[0])] + script[1:] + shlex.split(a.workload_args)
    if holds:
        job += ["--rounds", "1", "--hold"] + (["--count-calls"] if count_calls else [])
    rec = os.path.join(workdir, "rec.sdb")
    for p in (rec, rec + "-wal", rec + "-shm"):
        if os.path.exists(p):
            os.remove(p)
    cmd = job if rec_args is None else [a.stackscope, "record", *rec_args, *shlex.split(a.record_args), "-o", rec,
                                        "--", *job]
    errlog = os.path.join(workdir, "stderr.log")
    base = kernel_probes()
    res = {"config": name, "cmd": shlex.join(cmd), "ok": False}
    step_list = None  # (start ns, seconds) of each timed step, from step_rounds.py workloads
    t_start = time.monotonic()
    with open(errlog, "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, cwd=ROOT,
                                start_new_session=True)
    deadline = t_start + a.timeout
    t_sig = None
    # A job that hangs without printing would block the line loop: the watchdog kills its process group.
    watchdog = threading.Timer(a.timeout, lambda: proc.poll() is None and kill_group(proc))
    watchdog.daemon = True
    watchdog.start()
    try:
        for line in proc.stdout:
            tag, obj = parse_line(line)
            if tag == "RESULT":
                steps = obj.get("step_s")  # gpt2_overhead.py's worker
                res["median_step_s"] = statistics.median(steps) if steps else obj["median_step_s"]
                res["steps"] = len(steps) if steps else obj.get("steps")
                res["mean_step_s"] = statistics.fmean(steps) if steps else obj.get("mean_step_s")
                res["cpu_per_step_s"] = obj.get("cpu_per_step_s")  # step_rounds.py workloads
                if obj.get("step_start_ns"):
                    step_list = list(zip(obj["step_start_ns"], obj["step_s"]))
                if not holds and rec_args is not None:
                    res["links_held"] = links_held_by(proc.pid)
                    t_sig = time.monotonic()
                    proc.send_signal(signal.SIGINT)
            elif tag == "CALLS":
                res["calls"] = obj
            elif tag == "HOLDING":
                if rec_args is not None:
                    res["links_held"] = links_held_by(proc.pid)
                t_sig = time.monotonic()
                proc.send_signal(signal.SIGINT)  # the recorder passes it to the job, as a user's Ctrl-C
            if time.monotonic() > deadline:
                break
        remaining = max(1.0, deadline - time.monotonic())
        rc = proc.wait(timeout=remaining)
        t_exit = time.monotonic()
    except subprocess.TimeoutExpired:
        kill_group(proc)
        proc.wait()
        res["error"] = f"timed out after {a.timeout:.0f} s"
        return res
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            kill_group(proc)
            proc.wait()
    res["rc"] = rc
    if rc == -signal.SIGKILL and time.monotonic() >= deadline:
        res["error"] = f"timed out after {a.timeout:.0f} s"
        return res
    with open(errlog) as f:
        stderr = f.read()
    if "median_step_s" not in res:
        res["error"] = f"no RESULT line (rc {rc}): {stderr[-1500:]}"
        return res
    res["ok"] = True
    if rec_args is None:
        return res
    if t_sig is not None:
        res["stop_exit_s"] = t_exit - t_sig
        m = re.search(r"detached in the background \(pid (\d+)\)", stderr)
        helper = int(m.group(1)) if m else None
        # Gone: the background detacher (the last holder of the probes' fds) has exited, or, where the recorder
        # started none, the kernel's BPF link/program counts are back to their values before the run. The counts
        # are machine-wide (another tracer on the machine moves them), so they only decide without a detacher.
        gone = helper_gone = links_back = None
        while time.monotonic() - t_sig < a.probe_wait:
            now = time.monotonic() - t_sig
            if helper and helper_gone is None and not pid_alive(helper):
                helper_gone = now
            if links_back is None and probes_back(kernel_probes(), base):
                links_back = now
            if (helper_gone is not None) if helper else (links_back is not None):
                gone = now
                break
            time.sleep(0.02)
        res["probes_gone_s"] = gone  # None: still there after --probe-wait seconds
        res["detacher_exit_s"], res["kernel_counts_back_s"] = helper_gone, links_back
        res["background_detacher"] = helper is not None
    res["base"] = base
    res["stderr_tail"] = stderr[-600:]
    try:
        info = json.loads(subprocess.run([a.stackscope, "info", "--json", rec], capture_output=True, text=True,
                                         timeout=60).stdout)
        res["events_by_layer"] = info.get("events_by_layer", {})
        res["events"] = sum(res["events_by_layer"].values())
        res["drops"] = info.get("drops", {})
        res["dropped"] = sum(v for v in res["drops"].values() if isinstance(v, (int, float)))
        res["file_bytes"] = info.get("file_bytes")
        res["notes"] = [n.get("text", "")[:600] for n in info.get("notes", [])][:16]
        cost = json.loads(info.get("meta", {}).get("recorder_cpu", "null") or "null")  # the recorder's own CPU
        if cost and cost.get("wall_s"):
            res["recorder_cpu_pct"] = 100.0 * cost["cpu_s"] / cost["wall_s"]
            res["recorder_threads_s"] = cost.get("threads", {})
    except (OSError, subprocess.SubprocessError, json.JSONDecodeError) as e:
        res["info_error"] = str(e)
        info = {}
    if step_list:
        res.update(watched_split(a.stackscope, rec, step_list, workdir,
                                 [n.get("text", "") for n in info.get("notes", [])]))
    if a.keep_recordings:  # the last round's recording of each configuration, to read the series again
        keep = os.path.join(a.out, f"{a.workload}.{re.sub(r'[^A-Za-z0-9_.-]+', '_', name)}.sdb")
        shutil.copyfile(rec, keep)
        with open(keep[:-4] + ".steps.json", "w") as f:  # split_steps can be rerun on the two
            json.dump(step_list or [], f)
    return res

def watching_series(stackscope, rec, workdir):
    """{family: [(t_ns, 0 or 1)]} from the recording's trace.<family>.watching series (CLOCK_MONOTONIC ns, the
    clock of step_rounds.py's step starts)."""
    path = os.path.join(workdir, "watching.csv")
    try:
        subprocess.run([stackscope, "export", rec, "--format", "csv", "--what", "samples", "--series",
                        "trace.*.watching", "--no-derived", "-q", "-o", path],
                       capture_output=True, timeout=120, check=True)
        flips = {}
        with open(path) as f:
            for row in csv.DictReader(f):
                if row["series"].startswith("trace.") and row["series"].endswith(".watching"):
                    flips.setdefault(row["series"][6:-9], []).append((int(row["t_ns"]), float(row["value"] or 0)))
        return flips
    finally:
        if os.path.exists(path):
            os.remove(path)


_TOGGLE_NOTE = re.compile(r"^(\w+): probes watched .*?attach ([\d.]+) ms, detach ([\d.]+) ms per window")


def toggle_times(notes):
    """{family: (attach ms, detach ms)}, each the mean per window that the recorder's end note states."""
    out = {}
    for n in notes or []:
        m = _TOGGLE_NOTE.match(n)
        if m:
            out[m.group(1)] = (float(m.group(2)), float(m.group(3)))
    return out


# Margins around a window the series shows, where the note gives no attach/detach time: the links are attached
# before the series goes to 1 and destroyed after it goes to 0, and the probes trap all that time (detaching a
# family took 110-130 ms on the H200, attaching 8-16 ms).
DEFAULT_ATTACH_MS, DEFAULT_DETACH_MS = 50.0, 250.0


def split_steps(steps, flips, toggles=None):
    """The probes' cost inside one recorded run, from its timed steps [(start ns, seconds)] and its families'
    watching series {family: [(t ns, 0/1)]} (watching_series). Pure: the unit test feeds it constructed series.

    Why in-run: between fresh processes the step time of one machine spreads +-10-15 % (H200 launch-bound, bare
    against bare), more than a 2 % target; within a run, steps with and without probes alternate every few seconds
    in the same process, with its GPU clocks and the recorder's other threads.

    Each step is one of
      watched  it overlaps a window the series shows (a duty-cycled family's probes attached, calls counted),
      edge     it overlaps the margins of such a window (probes attaching before the series says 1, detaching after
               it says 0: toggles() from the end notes, doubled) or a gap's middle, where a family with return probes
               opens entry-only calibration windows that trap but leave the series at 0 (sampled_count.h),
      clean    neither: no duty-cycled probe could trap in it.
    probe_cost = mean(steps) / mean(clean) - 1 = share_watched x cost per watched step + share_edge x cost per
    edge step, over the steady section: the steps after every cycled family's first detach (before it, the
    budget had not yet cut anything back: the start-up full attachment, reported apart).
    Families whose series is 1 over the whole timed section (never detached while it ran: nccl on one GPU; the
    final 0 every family gets when the recording stops comes after the steps) cost every step alike and split
    nothing: they are listed as attached_throughout, their cost is in the fresh-process pairs only."""
    toggles = toggles or {}
    steps = sorted((int(t), float(d)) for t, d in steps)
    if not steps:
        return {"split_error": "no timed steps"}
    t_first, t_end = steps[0][0], max(t + int(d * 1e9) for t, d in steps)
    cycled, throughout, first_detach, windows, margins = [], [], {}, [], []
    in_section = {}
    for fam, pts in sorted(flips.items()):
        pts = sorted(pts)
        ons, state, since = [], 0.0, None  # before its first point the family had no probes
        for t, x in pts:
            if x >= 0.5 and state < 0.5:
                since = t
            elif x < 0.5 and state >= 0.5:
                ons.append((since, t))
            state = x
        if state >= 0.5:
            ons.append((since, None))  # still attached at the end of the recording
        covers = any(a <= t_first and (b is None or b >= t_end) for a, b in ons)
        if covers:
            throughout.append(fam)
            continue
        if not ons:
            continue  # never attached
        cycled.append(fam)
        att_ms, det_ms = toggles.get(fam, (DEFAULT_ATTACH_MS / 2, DEFAULT_DETACH_MS / 2))
        pre, post = int(2e6 * max(att_ms, 2.5)), int(2e6 * max(det_ms, 2.5))
        ends = [b for a, b in ons if b is not None]
        first_detach[fam] = ends[0] + post if ends else None
        big = 1 << 62
        for i, (a, b) in enumerate(ons):
            b = big if b is None else b
            windows.append((a, b))
            margins.append((a - pre, b + post))
            if i + 1 < len(ons) and i > 0:  # a gap between two counted windows (not after the start-up one)
                a2, b2 = ons[i + 1]
                b2 = big if b2 is None else b2
                mid = (a + a2) // 2
                length = int(1.2 * max(b - a, b2 - a2))
                slack = (a2 - a) // 50
                margins.append((mid - pre - slack, mid + length + post + slack))
        in_section[fam] = sum(1 for a, b in ons if a < t_end and (b is None or b > t_first))
    out = {"families_cycled": cycled, "attached_throughout": throughout, "steps_timed": len(steps),
           "timed_s": (t_end - t_first) / 1e9, "windows_in_timed": in_section}
    if not cycled:
        out["split_error"] = ("no trace.*.watching series went to 0 during the timed steps (no family was "
                              "duty-cycled while they ran)")
        return out
    if any(v is None for v in first_detach.values()):
        never = [f for f, v in first_detach.items() if v is None]
        out["split_error"] = f"never detached: {', '.join(never)}"
        return out
    steady_from = max(first_detach.values())
    out["first_detach_after_first_step_s"] = (steady_from - t_first) / 1e9

    def overlaps(spans, t0, t1):
        return any(a < t1 and b > t0 for a, b in spans)

    groups = {"watched": [], "edge": [], "clean": []}
    startup = []
    for t0, d in steps:
        if t0 < steady_from:
            startup.append(d)
            continue
        t1 = t0 + int(d * 1e9)
        g = "watched" if overlaps(windows, t0, t1) else "edge" if overlaps(margins, t0, t1) else "clean"
        groups[g].append(d)
    every = [d for g in groups.values() for d in g]
    out.update({"steps_startup": len(startup), "steps_steady": len(every),
                "steps_watched": len(groups["watched"]), "steps_edge": len(groups["edge"]),
                "steps_unwatched": len(groups["clean"])})
    if startup:
        out["mean_step_startup_s"] = statistics.fmean(startup)
    clean = groups["clean"]
    if len(clean) < 20:
        out["split_error"] = (f"{len(clean)} clean steps after the start-up attachment (need 20): the timed section "
                              f"is too short for the budget's steady state, or windows cover it")
        return out
    mc = statistics.fmean(clean)
    out["mean_step_unwatched_s"] = mc
    n = len(every)
    cost, var = 0.0, 0.0
    ratio_all = statistics.fmean(every) / mc
    for g in ("watched", "edge"):
        xs = groups[g]
        if not xs:
            out[f"cost_{g}"] = 0.0
            continue
        share, mg = len(xs) / n, statistics.fmean(xs)
        out[f"share_{g}"] = share
        out[f"per_step_cost_{g}"] = mg / mc - 1.0
        out[f"cost_{g}"] = share * (mg / mc - 1.0)
        cost += out[f"cost_{g}"]
        if len(xs) > 1:
            var += (share * statistics.stdev(xs) / len(xs) ** 0.5 / mc) ** 2
    var += (ratio_all * statistics.stdev(clean) / len(clean) ** 0.5 / mc) ** 2
    out["probe_cost"] = cost  # = ratio_all - 1
    out["probe_cost_se"] = var ** 0.5  # steps taken as independent: a floor (rounds' spread is the honest error)
    return out


def watched_split(stackscope, rec, steps, workdir, notes):
    """split_steps on a recording: its watching series and its end notes' attach/detach times."""
    try:
        flips = watching_series(stackscope, rec, workdir)
    except (OSError, subprocess.SubprocessError, KeyError, ValueError) as e:
        return {"split_error": str(e)}
    if not flips:
        return {"split_error": "no trace.*.watching series (no cost budget in this configuration)"}
    return split_steps(steps, flips, toggle_times(notes))

# ---------------------------------------------------------------- summary


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def pair_overheads(rounds, name):
    """Per round: the configuration's median step against the same round's bare run (None where either failed)."""
    out = []
    for rnd in rounds:
        bare = next((r["median_step_s"] for r in rnd if r["config"] == "bare" and r["ok"]), None)
        run = next((r["median_step_s"] for r in rnd if r["config"] == name and r["ok"]), None)
        out.append(run / bare - 1.0 if run and bare else None)
    return out


def spread(xs):
    """Half the range of xs over their median (the noise a fresh-process pair carries), None under 2 values."""
    xs = [x for x in xs if x is not None]
    return (max(xs) - min(xs)) / 2 / statistics.median(xs) if len(xs) >= 2 else None


def summarise(a, configs, rounds, calls):
    rows = []
    bare = med(r["median_step_s"] for rnd in rounds for r in rnd if r["config"] == "bare" and r["ok"])
    bare_cpu = med(r.get("cpu_per_step_s") for rnd in rounds for r in rnd if r["config"] == "bare" and r["ok"])
    for name, args in configs:
        runs = [r for rnd in rounds for r in rnd if r["config"] == name]
        good = [r for r in runs if r["ok"]]
        step = med(r["median_step_s"] for r in good)
        cpu = med(r.get("cpu_per_step_s") for r in good)
        row = {"config": name, "record_args": None if args is None else shlex.join(args), "rounds": len(good),
               "failed": len(runs) - len(good), "median_step_s": step,
               "overhead": (step / bare - 1.0) if step and bare else None,
               "per_round_step_s": [r.get("median_step_s") for r in runs],
               "mean_step_s": med(r.get("mean_step_s") for r in good),
               # The job's CPU per step against bare's: what a duty-cycled probe costs, which the median step hides
               "cpu_per_step_s": cpu, "cpu_overhead": (cpu / bare_cpu - 1.0) if cpu and bare_cpu else None,
               "per_round_cpu_per_step_s": [r.get("cpu_per_step_s") for r in runs]}
        if args is not None:
            stops = [r.get("stop_exit_s") for r in good]
            gones = [r.get("probes_gone_s") for r in good if "probes_gone_s" in r]
            row.update({"stop_exit_s": med(stops), "probes_gone_s": med(gones),
                        "probes_gone_timeouts": sum(1 for g in gones if g is None),
                        "links_attached": med(r.get("links_held") for r in good),
                        "events": med(r.get("events") for r in good), "dropped": med(r.get("dropped") for r in good),
                        "events_by_layer": (good[-1].get("events_by_layer") if good else None),
                        "recorder_cpu_pct": med(r.get("recorder_cpu_pct") for r in good),
                        # in-run (split_steps): steady-section steps against those no duty-cycled probe touched
                        "probe_cost": med(r.get("probe_cost") for r in good),
                        "per_round_probe_cost": [r.get("probe_cost") for r in runs],
                        "probe_cost_se": med(r.get("probe_cost_se") for r in good),
                        "cost_watched": med(r.get("cost_watched") for r in good),
                        "cost_edge": med(r.get("cost_edge") for r in good),
                        "share_watched": med(r.get("share_watched") for r in good),
                        "per_step_cost_watched": med(r.get("per_step_cost_watched") for r in good),
                        "steps_unwatched_share": med(r["steps_unwatched"] / r["steps_steady"] for r in good
                                                     if r.get("steps_steady")),
                        "startup_share": med(r["steps_startup"] / r["steps_timed"] for r in good
                                             if r.get("steps_timed") and "steps_startup" in r),
                        "attached_throughout": sorted({f for r in good for f in r.get("attached_throughout", [])}),
                        "split_errors": sorted({r["split_error"] for r in good if r.get("split_error")})[:3],
                        # fresh-process pairs: each round's run against the same round's bare run
                        "pair_overheads": pair_overheads(rounds, name),
                        "recorder_threads_s": (good[-1].get("recorder_threads_s") if good else None),
                        "errors": [r.get("error") for r in runs if not r["ok"]][:2]})
        else:
            row["errors"] = [r.get("error") for r in runs if not r["ok"]][:2]
        rows.append(row)
    bare_spread = spread(r["median_step_s"] for rnd in rounds for r in rnd if r["config"] == "bare" and r["ok"])
    for row in rows:
        if row["config"] != "bare":
            row["verdict"] = verdict(row, bare_spread)
    return {"workload": a.workload, "workload_args": a.workload_args, "record_args": a.record_args,
            "bare_spread": bare_spread, "python": a.python, "stackscope": a.stackscope, "host": platform.node(), "machine": a.machine,
            "probe_wait_s": a.probe_wait, "calls": calls, "rows": rows, "rounds": rounds}


def verdict(row, bare_spread):
    """The configuration's cost: the in-run split where it measured (the precise figure: probes' windows and their
    edges, same process), with the fresh-process pairs beside it and their noise (what the bare runs alone spread)."""
    pairs = [x for x in row.get("pair_overheads") or [] if x is not None]
    v = {"pairs_median": statistics.median(pairs) if pairs else None, "pairs": row.get("pair_overheads"),
         "pairs_noise": bare_spread, "source": "pairs"}
    per = [x for x in row.get("per_round_probe_cost") or [] if x is not None]
    if per:
        v.update({"source": "in-run split", "cost": statistics.median(per), "cost_min": min(per), "cost_max": max(per),
                  "cost_se": row.get("probe_cost_se"), "rounds": len(per)})
    else:
        v["cost"] = v["pairs_median"]
    return v


def fmt_pct(x, sign=True):
    return "-" if x is None else (f"{x * 100:+.2f} %" if sign else f"{x * 100:.2f} %")


def fmt_s(x):
    if x is None:
        return "-"
    if x < 1e-3:
        return f"{x * 1e6:.1f} us"
    return f"{x * 1e3:.2f} ms" if x < 1 else f"{x:.2f} s"


def markdown(s):
    c = s["calls"] or {}
    lines = [f"### {s['workload']} ({s['machine']})", ""]
    if c:
        rate = (f"{c.get('cuda_calls_per_step', 0):.0f} CUDA calls/step, {c.get('cuda_calls_per_s', 0) / 1e3:.1f} k "
                f"CUDA calls/s, {c.get('kernels_per_step', 0):.0f} kernels/step, " if c.get("cuda_calls_per_step")
                else "")
        lines += [f"Bare: {rate}{c.get('ops_per_step', 0):.0f} aten operator calls/step, "
                  f"{c.get('ops_per_s', 0) / 1e3:.1f} k operator calls/s (torch.profiler).", ""]
    lines += ["| config | median step | steps/s | vs bare | mean step | CPU per step | CPU vs bare | stop (SIGINT -> "
              "exit) | probes gone | BPF links | events | dropped |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in s["rows"]:
        ov = "" if r["config"] == "bare" else ("-" if r["overhead"] is None else f"{r['overhead'] * 100:+.1f} %")
        gone = fmt_s(r.get("probes_gone_s"))
        if r.get("probes_gone_timeouts"):  # rounds whose probes were still there after --probe-wait
            wait = f"> {s.get('probe_wait_s', 0):.0f} s"
            gone = wait if r.get("probes_gone_s") is None else f"{gone} ({r['probes_gone_timeouts']} rounds {wait})"
        fail = f" ({r['failed']} failed)" if r["failed"] else ""
        sps = f"{1 / r['median_step_s']:.0f}" if r["median_step_s"] else "-"
        links = "" if r["config"] == "bare" else \
            ("-" if r.get("links_attached") is None else f"{r['links_attached']:.0f}")
        cov = "" if r["config"] == "bare" or r.get("cpu_overhead") is None else f"{r['cpu_overhead'] * 100:+.1f} %"
        lines.append(f"| {r['config']}{fail} | {fmt_s(r['median_step_s'])} | {sps} | {ov} | {fmt_s(r.get('mean_step_s'))} | "
                     f"{fmt_s(r.get('cpu_per_step_s'))} | {cov} | {fmt_s(r.get('stop_exit_s'))} | "
                     f"{gone} | {links} | "
                     f"{'' if r.get('events') is None else int(r['events'])} | "
                     f"{'' if r.get('dropped') is None else int(r['dropped'])} |")
    for r in s["rows"]:  # where the recorder's own CPU went (a core of the machine, not the job's thread)
        if r.get("recorder_cpu_pct") is not None:
            top = sorted((r.get("recorder_threads_s") or {}).items(), key=lambda kv: -kv[1])[:4]
            lines.append(f"\nRecorder CPU, {r['config']}: {r['recorder_cpu_pct']:.1f} % of a core (median); last round's "
                         "threads: " + ", ".join(f"{k} {v:.2f} s" for k, v in top))
    for r in s["rows"]:  # the verdict: the in-run split (split_steps) where it measured, the pairs beside it
        v = r.get("verdict")
        if not v:
            continue
        pairs = ", ".join("-" if x is None else f"{x * 100:+.1f}" for x in v.get("pairs") or [])
        noise = "" if v.get("pairs_noise") is None else f"; bare runs alone spread +-{v['pairs_noise'] * 100:.1f} %"
        pair_text = f"fresh-process pairs: median {fmt_pct(v.get('pairs_median'))} (rounds: {pairs} %{noise})"
        if v["source"] == "in-run split":
            per = ", ".join("-" if x is None else f"{x * 100:+.2f}" for x in r.get("per_round_probe_cost") or [])
            se = "" if v.get("cost_se") is None else f", +-{v['cost_se'] * 100:.2f} % a round from the steps' spread"
            lines.append(
                f"\n**Cost, {r['config']}: {fmt_pct(v['cost'])}** in-run (median of {v['rounds']} rounds: {per} %{se}) = "
                f"watched windows {fmt_pct(r.get('cost_watched'))} ({fmt_pct(r.get('per_step_cost_watched'))} a watched "
                f"step x {fmt_pct(r.get('share_watched'), False)} of the steps) + their edges "
                f"{fmt_pct(r.get('cost_edge'))} (attach/detach, entry-only windows), against the "
                f"{fmt_pct(r.get('steps_unwatched_share'), False)} of the steady steps no duty-cycled probe touched, "
                f"in the same process; the start-up full attachment held {fmt_pct(r.get('startup_share'), False)} of "
                f"the timed steps (left out). Not in it: families attached throughout "
                f"({', '.join(r.get('attached_throughout') or []) or 'none'}) and the recorder's threads, which only "
                f"the {pair_text} can show.")
        else:
            why = "; ".join(r.get("split_errors") or []) or "no step times"
            lines.append(f"\nCost, {r['config']}: {pair_text}; no in-run split ({why})")
    n = max((r["rounds"] for r in s["rows"]), default=0)
    lines += ["", f"Median over {n} interleaved rounds; workload args `{s['workload_args']}`; "
              f"extra record args `{s['record_args']}`."]
    errs = [e for r in s["rows"] for e in r.get("errors", []) if e]
    if errs:
        lines += ["", "Errors (ends of stderr): " + " / ".join(e.replace("\n", " ")[-300:] for e in errs[:3])]
    return "\n".join(lines) + "\n"

# ---------------------------------------------------------------- main


def add_run_args(ap):
    """The binary, the python and the arguments of the job and the recorder (attach_pairs.py takes them too)."""
    ap.add_argument("--stackscope", default=os.path.join(ROOT, "build/src/cli/stackscope"))
    ap.add_argument("--python", default=sys.executable, help="the python that has torch")
    ap.add_argument("--workload-args", default="", help="passed to the workload script (e.g. '--steps 200')")
    ap.add_argument("--record-args", default="", help="added to every traced run's `stackscope record`")
    ap.add_argument("--machine", default="", help="machine description for the table")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", required=True, choices=sorted(WORKLOADS))
    ap.add_argument("--out", required=True, help="directory for WORKLOAD.json and WORKLOAD.md")
    ap.add_argument("--rounds", type=int, default=4)
    add_run_args(ap)
    ap.add_argument("--configs", default="",
                    help="';'-separated NAME=RECORD ARGS, 'bare' for no recorder; default: bare; nvml,host; "
                         "cuda,nccl,nvml,host; default; default --detail full (when `record --help` lists it)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds one run may take")
    ap.add_argument("--probe-wait", type=float, default=60, help="seconds to wait for probes to go after a stop")
    ap.add_argument("--budget-s", type=float, default=0,
                    help="wall seconds for the whole run: no round starts that the last one says would not fit")
    ap.add_argument("--keep-recordings", action="store_true",
                    help="copy each configuration's last recording to OUT/WORKLOAD.CONFIG.sdb")
    a = ap.parse_args()
    a.stackscope = os.path.abspath(a.stackscope) if os.sep in a.stackscope else a.stackscope
    if not a.machine:
        a.machine = f"{platform.node()}, {os.cpu_count()} cores"
    os.makedirs(a.out, exist_ok=True)
    help_text = record_help(a.stackscope)
    if not help_text:
        print(f"warning: `{a.stackscope} record --help` printed nothing", file=sys.stderr)
    configs = parse_configs(a.configs) if a.configs else default_configs(help_text)
    if not any(n == "bare" for n, _ in configs):
        configs.insert(0, ("bare", None))
    t0 = time.monotonic()
    rounds, calls = [], None
    json_path = os.path.join(a.out, a.workload + ".json")
    md_path = os.path.join(a.out, a.workload + ".md")
    calls_script = WORKLOADS[a.workload][2]
    with tempfile.TemporaryDirectory(prefix="overhead-") as work:
        if calls_script:  # workloads that cannot count their own calls in the first bare run
            try:
                p = subprocess.run([a.python, os.path.join(ROOT, calls_script[0])] + calls_script[1:] +
                                   shlex.split(a.workload_args), capture_output=True, text=True, cwd=ROOT,
                                   timeout=a.timeout)
                for line in p.stdout.splitlines():
                    tag, obj = parse_line(line)
                    if tag == "CALLS":
                        calls = obj
                if calls is None:
                    print(f"no CALLS line from {calls_script[0]}: {p.stderr[-500:]}", file=sys.stderr)
            except (OSError, subprocess.SubprocessError) as e:  # the timing rounds go on without the call rate
                print(f"{calls_script[0]}: {e}", file=sys.stderr)
        for i in range(a.rounds):
            elapsed = time.monotonic() - t0
            if a.budget_s and rounds and elapsed + elapsed / len(rounds) > a.budget_s:
                print(f"budget: {elapsed:.0f} of {a.budget_s:.0f} s used, stopping after {len(rounds)} rounds",
                      flush=True)
                break
            order = configs if i % 2 == 0 else list(reversed(configs))
            rnd = []
            for name, args in order:
                r = run_once(a, name, args, work, count_calls=(calls is None and args is None))
                if r.get("calls") and calls is None:
                    calls = r["calls"]
                rnd.append(r)
                print(json.dumps({"round": i, **{k: r.get(k) for k in ("config", "ok", "median_step_s",
                                                                         "stop_exit_s", "probes_gone_s", "events",
                                                                         "dropped", "error")}}), flush=True)
            rounds.append(rnd)
            s = summarise(a, configs, rounds, calls)  # written every round: a later kill keeps the rounds done
            with open(json_path, "w") as f:
                json.dump(s, f, indent=1)
            with open(md_path, "w") as f:
                f.write(markdown(s))
    if not rounds:
        print("no round ran", file=sys.stderr)
        return 1
    print(open(md_path).read())
    return 0


if __name__ == "__main__":
    sys.exit(main())
