#!/usr/bin/env python3
"""Compares a recording's torch operator counts over op_count_check.py's timed loop with torch.profiler's
(calls per step x steps).

  --detail full (events):   stackscope export X.sdb --format csv --what events -o X.events.csv
  default, budgeted:        stackscope export X.sdb --format csv --what samples -o X.samples.csv
                            stackscope info X.sdb --json > X.info.json
  python3 eval/tracing/op_count_compare.py --truth T.json (--events X.events.csv | --samples X.samples.csv
                                            --info X.info.json) [--json OUT]

Budgeted: the estimate over the loop is what was counted before the torch family's first detach, plus what was
counted after it times the end note's factor ("torch: estimated calls: ... scale by F (error about E%"); also the
factor from watched wall time ("scaling by watched wall time would say W") and the estimate the note did not use
("the job's CPU time would say F2 (error about E2%" or "the synchronisations would say ...") for comparison; which
one the note used is its "estimator: syncs|cpu|wall". Probe names carry the
overload (aten::add.Tensor), the profiler's do not: probes are summed per base name, and a base name whose
overloads are not all probed can read low in both modes (compare with the full-detail run)."""
import argparse
import bisect
import collections
import csv
import json
import re
import sys


def base(name):
    return name.split(".", 1)[0]


def full_counts(events_path, lo, hi, pid):
    seen = collections.Counter()
    with open(events_path) as f:
        for row in csv.DictReader(f):
            if row["layer"] != "torch" or (pid and int(row["pid"]) != pid):
                continue
            if lo <= int(row["start_ns"]) <= hi:
                seen[base(row["name"])] += 1
    return seen


def budgeted_counts(samples_path, info_path, lo, hi):
    notes = [n["text"] for n in json.load(open(info_path)).get("notes", [])]
    note = next((n for n in notes if n.startswith("torch: estimated calls")), None)
    if not note:
        sys.exit("no 'torch: estimated calls' note: the torch family was never duty-cycled in this recording")
    m = re.search(r"scale by ([0-9.e+]+) \(error about ([0-9]+)%", note)
    w = re.search(r"wall time would say ([0-9.e+]+)", note)
    scale, error, wall = float(m.group(1)), float(m.group(2)) / 100, float(w.group(1))
    how = re.search(r"estimator: (\w+)", note)  # absent before the estimate from the syncs existed: the CPU time's
    other = re.search(r"(CPU time|synchronisations) would say ([0-9.e+]+) \(error about ([0-9]+)%", note)
    meta = {"scale": scale, "error": error, "wall_scale": wall, "note": note,
            "estimator": how.group(1) if how else ("cpu" if "from the job's CPU time" in note else "wall"),
            "other": None}
    if other:
        meta["other"] = {"estimator": "cpu" if other.group(1) == "CPU time" else "syncs",
                         "scale": float(other.group(2)), "error": float(other.group(3)) / 100}
    series = collections.defaultdict(list)
    watching = []
    with open(samples_path) as f:
        for row in csv.DictReader(f):
            key, t, v = row["series"], int(row["t_ns"]), float(row["value"] or 0)
            if key == "trace.torch.watching":
                watching.append((t, v))
            elif key.startswith("torch.op.calls{"):
                series[key[len("torch.op.calls{"):-1]].append((t, v))
    watching.sort()
    detach = next((t for t, v in watching if v == 0), None)
    reopen = next((t for t, v in watching if v == 1 and detach and t > detach), None)

    def value_at(points, t):  # the cumulative count at t (last sample at or before it)
        i = bisect.bisect_right([p[0] for p in points], t)
        return points[i - 1][1] if i else 0.0

    note_base = re.search(r"; ([0-9]+) calls counted, ([0-9]+) in entry-only windows, ([0-9]+) estimated unwatched", note)
    if note_base:  # the estimator's own base: calls in the counted windows since the first detach (hits / 2)
        meta["note_counted"], meta["note_entry_only"], meta["note_unwatched"] = (float(g) for g in note_base.groups())
    since_detach = outside_loop = 0.0  # every probed operator's counts since the first detach, and outside the loop
    counted, est, est_wall, est_other, since = (collections.Counter() for _ in range(5))
    for name, points in series.items():
        points.sort()
        a, b = value_at(points, lo), value_at(points, hi + 1)
        if detach is None or detach >= hi:
            whole, later = b - a, 0.0
        else:
            # the count at the first detach: the tracer samples the operators as it closes a counted window and
            # nothing is counted until the next one opens, so it is the last sample before that
            at = value_at(points, reopen - 1 if reopen else hi)
            whole, later = max(0.0, at - a) if detach > lo else 0.0, b - max(a, at)
        if detach is not None:
            after = points[-1][1] - value_at(points, reopen - 1 if reopen else points[-1][0])
            since_detach += after
            since[base(name)] += after
            outside_loop += after - max(0.0, b - max(a, value_at(points, reopen - 1 if reopen else hi)))
        counted[base(name)] += b - a
        est[base(name)] += whole + later * scale
        est_wall[base(name)] += whole + later * wall
        if meta["other"]:
            est_other[base(name)] += whole + later * meta["other"]["scale"]
    meta["counted_since_detach"], meta["counted_outside_loop"] = since_detach, outside_loop
    meta["first_detach_ns"], meta["since_detach"] = detach, dict(since)
    return counted, est, est_wall, est_other, meta


def steps_since(phases, t):
    """Steps made after t (CLOCK_MONOTONIC ns), a phase that t cuts taken as steady."""
    n = 0.0
    for p in phases:
        a, b = p["start_ns"], p["end_ns"]
        n += p["steps"] if t <= a else p["steps"] * max(0, b - t) / (b - a) if b > a else 0
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--truth", required=True)
    ap.add_argument("--events")
    ap.add_argument("--samples")
    ap.add_argument("--info")
    ap.add_argument("--json")
    args = ap.parse_args()
    truth = json.load(open(args.truth))
    lo, hi, steps = truth["loop"]["start_ns"], truth["loop"]["end_ns"], truth["steps"]
    want = {k: v * steps for k, v in truth["per_step"].items()}
    rows, meta = [], {}
    if args.events:
        got = full_counts(args.events, lo, hi, truth.get("pid"))
        for op in sorted(got):
            t = want.get(op, 0)
            rows.append({"op": op, "profiler": t, "recorded": got[op], "ratio": got[op] / t if t else None})
    else:
        counted, est, est_wall, est_other, meta = budgeted_counts(args.samples, args.info, lo, hi)
        for op in sorted(est):
            t = want.get(op, 0)
            rows.append({"op": op, "profiler": t, "counted": counted[op], "estimate": est[op],
                         "error": est[op] / t - 1 if t else None,
                         "wall_error": est_wall[op] / t - 1 if t else None,
                         "other_error": est_other[op] / t - 1 if t and meta["other"] else None,
                         "within_stated": abs(est[op] / t - 1) <= meta["error"] if t else None})
    print(f"{truth['workload']} on {truth['device']}: {steps} steps, {truth['seconds']:.1f} s")
    if meta:
        o = meta["other"]
        print(f"estimator {meta['estimator']}: scale {meta['scale']:.4g} (stated error {100 * meta['error']:.0f}%), "
              f"wall-time scale {meta['wall_scale']:.4g}" +
              (f", {o['estimator']} would say {o['scale']:.4g} (stated {100 * o['error']:.0f}%)" if o else ""))
        other_head = f" by {o['estimator']} (stated {100 * o['error']:.0f}%) |" if o else ""
        print("| op | torch.profiler | counted | estimate | error | stated | by wall time |" + other_head)
        print("|---|---|---|---|---|---|---|" + ("---|" if o else ""))
        for r in rows:
            if r["profiler"]:
                print(f"| {r['op']} | {r['profiler']:.0f} | {r['counted']:.0f} | {r['estimate']:.0f} | "
                      f"{100 * r['error']:+.1f}% | {100 * meta['error']:.0f}% | {100 * r['wall_error']:+.1f}% |" +
                      (f" {100 * r['other_error']:+.1f}% |" if o else ""))
        tot_t = sum(r["profiler"] for r in rows if r["profiler"])
        tot_e = sum(r["estimate"] for r in rows if r["profiler"])
        print(f"all probed ops: profiler {tot_t:.0f}, estimate {tot_e:.0f} ({100 * (tot_e / tot_t - 1):+.1f}%)"
              if tot_t else "no probed op in the profiler's counts")
        # What the note's factor is for: every count since the first detach, against the steps made since then (each
        # phase's, op_count_check.py's "phases": warmup, profiler, loop); the loop alone (above) also depends on
        # where the windows fell, inside the loop or not.
        if truth.get("phases") and meta.get("first_detach_ns"):
            n = steps_since(truth["phases"], meta["first_detach_ns"])
            print(f"since the first detach ({n:.0f} steps; the note's factor is for these counts):")
            print("| op | torch.profiler | counted | estimate | error | stated |")
            print("|---|---|---|---|---|---|")
            tot_t = tot_e = 0.0
            for op in sorted(meta["since_detach"]):
                t, c = truth["per_step"].get(op, 0) * n, meta["since_detach"][op]
                if not t:
                    continue
                tot_t, tot_e = tot_t + t, tot_e + c * meta["scale"]
                print(f"| {op} | {t:.0f} | {c:.0f} | {c * meta['scale']:.0f} | "
                      f"{100 * (c * meta['scale'] / t - 1):+.1f}% | {100 * meta['error']:.0f}% |")
            if tot_t:
                meta["since_detach_error"] = tot_e / tot_t - 1
                print(f"all probed ops since the first detach: profiler {tot_t:.0f}, estimate {tot_e:.0f} "
                      f"({100 * meta['since_detach_error']:+.1f}%)")
        # The note's factor is (counted + entry-only + unwatched) / counted over everything since the first detach:
        # the operators' counts there times it give the note's estimate. Counts made outside the loop in stretches
        # that did not follow the syncs (the warmup's or the profiler's 20 steps under one sync) make the loop's
        # part of the counts smaller than its part of the calls: the loop's estimate is low by about their share.
        if "note_counted" in meta and meta["note_counted"] > 0:
            c, n = meta["counted_since_detach"], meta["note_counted"]
            total = n + meta["note_entry_only"] + meta["note_unwatched"]
            print(f"counts since the first detach, every probed op: {c:.0f} against the note's {n:.0f} calls counted "
                  f"({100 * (c / n - 1):+.2f}%); x scale {c * meta['scale']:.0f} against the note's estimate "
                  f"{total:.0f}; counted outside the loop: {meta['counted_outside_loop']:.0f} "
                  f"({100 * meta['counted_outside_loop'] / c if c else 0:.1f}% of the counts)")
    else:
        print("| op | torch.profiler | recorded (--detail full) | ratio |")
        print("|---|---|---|---|")
        for r in rows:
            print(f"| {r['op']} | {r['profiler']:.0f} | {r['recorded']} | "
                  f"{'-' if r['ratio'] is None else format(r['ratio'], '.4f')} |")
    if args.json:
        json.dump({"truth": truth, "rows": rows, "meta": meta}, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
