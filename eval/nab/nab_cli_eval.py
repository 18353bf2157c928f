#!/usr/bin/env python3
"""NAB through stackscope's command line, as a user would run it: every file imported (`stackscope import
--format csv`), analysed with the defaults (`stackscope analyze --json`, which on an imported table is the causal
series detector, bins sized from the sampling interval), each finding's start one detection -- on the last row
of the finding's first bin, the row whose arrival raised it (no look-ahead). Scored with NAB's standard profile
(nab_scoring.py) and set beside NAB's published per-file scores of ARTime, Numenta HTM, KNN-CAD, Random Cut
Forest and Windowed Gaussian on the same files.

Threshold: NAB tunes every detector's threshold on its whole corpus. Here the threshold is chosen on part A (every
other file of each group, sorted by name) and reported on part B (the rest) and on all 45; the CLI's default is
part A's choice. The scorer is checked against NAB's own per-file counts (rows inside / outside scored windows
equal the published TP+FN and TN+FP of every file) and the null detector's published scores.

usage: nab_cli_eval.py STACKSCOPE_BIN NAB_DIR OUT_DIR [thresholds, comma-separated]
(default grid 0.03,0.04,0.045,0.05,0.055,0.06,0.065,0.07,0.08,0.1, as in docs/benchmarks/host-series-nab.md)
"""
import csv
import datetime as dt
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nab_scoring import normalized, score_file, sweep  # noqa: E402

PEERS = [("ARTime", "ARTime"), ("numenta", "Numenta HTM"), ("knncad", "KNN-CAD"),
         ("randomCutForest", "Random Cut Forest"), ("windowedGaussian", "Windowed Gaussian")]


def epoch(ts):
    ts = ts.replace("T", " ").rstrip("Z")
    if "." in ts:
        ts = ts.split(".")[0]
    return dt.datetime.strptime(ts, "%Y-%m-%d %H:%M:%S").replace(tzinfo=dt.timezone.utc).timestamp()


def published(nab_dir, detector):
    out = {}
    with open(os.path.join(nab_dir, "published_scores", f"{detector}_standard_scores.csv")) as f:
        for row in csv.DictReader(f):
            out[row["File"]] = row
    return out


def markdown(r):
    """The summary and per-file tables for docs/benchmarks/host-series-nab.md."""
    names = ["stackscope series"] + [n for _, n in PEERS]
    out = ["| files | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for sname, row in r["table"].items():
        if "stackscope series" in row:
            cells = [f"{row[n]:.1f}" for n in names]
        else:
            cells = [f"raw {row[n + ' (raw)']:.2f}" for n in names]
        best = max(range(len(names)), key=lambda k: float(cells[k].split()[-1]))
        cells[best] = f"**{cells[best]}**"
        out.append(f"| {sname} ({row['files']}) | " + " | ".join(cells) + " |")
    out += ["", "| file (part) | windows found | FP | raw | " + " | ".join(n for _, n in PEERS) + " |",
            "|---|---|---|---|" + "---|" * len(PEERS)]
    for f, p in r["per_file"].items():
        out.append(f"| {f} ({p['part']}) | {p['windows_detected']}/{p['windows']} | {p['fp']} | {p['raw']:.2f} | " +
                   " | ".join(f"{p[n]:.2f}" for _, n in PEERS) + " |")
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    binary, nab_dir, out_dir = sys.argv[1:4]
    grid = ([float(x) for x in sys.argv[4].split(",")] if len(sys.argv) > 4
            else [0.03, 0.04, 0.045, 0.05, 0.055, 0.06, 0.065, 0.07, 0.08, 0.1])
    os.makedirs(out_dir, exist_ok=True)
    labels = json.load(open(os.path.join(nab_dir, "combined_windows.json")))
    files = sorted(labels)
    null = published(nab_dir, "null")
    counts = published(nab_dir, "ARTime")
    groups = {}
    for f in files:
        groups.setdefault(f.split("/")[0], []).append(f)
    part = {}
    for g, fs in groups.items():
        for k, f in enumerate(sorted(fs)):
            part[f] = "A" if k % 2 == 0 else "B"

    per_file = {}
    scorer_rows_match = 0
    null_match = 0
    t_import = t_analyze = 0.0
    for f in files:
        with open(os.path.join(nab_dir, f)) as fh:
            rows = list(csv.reader(fh))[1:]
        ts = [r[0] for r in rows]
        tsec = [epoch(t) for t in ts]
        wins = [(a.split(".")[0], b.split(".")[0]) for a, b in labels[f]]
        swept = sweep(ts, wins)
        inside = sum(1 for _, n in swept if n not in ("probationary", None))
        outside = sum(1 for _, n in swept if n is None)
        c = counts[f]
        scorer_rows_match += (inside, outside) == (int(c["TP"]) + int(c["FN"]), int(c["TN"]) + int(c["FP"]))
        scored_windows = len({n for _, n in swept if n not in ("probationary", None)})
        null_match += abs(float(null[f]["Score"]) + scored_windows) < 1e-9
        rec = os.path.join(out_dir, f.replace("/", "__") + ".sdb")
        t0 = time.time()
        subprocess.run([binary, "import", "--format", "csv", os.path.join(nab_dir, f), "-o", rec, "-q"], check=True)
        t_import += time.time() - t0
        by_thr = {}
        for thr in grid:
            t0 = time.time()
            res = subprocess.run([binary, "analyze", rec, "--json", "--no-store", "--series-threshold", str(thr)],
                                 check=True, capture_output=True, text=True)
            t_analyze += time.time() - t0
            j = json.loads(res.stdout)["series"]
            bin_s = j["recordings"][0]["bin_ns"] / 1e9
            det = set()
            for fd in j["findings"]:
                start = epoch(fd["start_utc"])
                # the last row of the finding's first bin: the row whose arrival raised it
                cand = [i for i, t in enumerate(tsec) if start <= t < start + bin_s]
                if cand:
                    det.add(cand[-1])
            raw, hit, nwin, fp_rows, fp_cost = score_file(swept, det)
            by_thr[thr] = {"raw": raw, "windows_detected": hit, "windows": nwin, "fp": fp_rows, "fp_cost": fp_cost,
                           "findings": len(j["findings"])}
        per_file[f] = by_thr
        os.remove(rec)

    def norm(fs, thr):
        raw = sum(per_file[f][thr]["raw"] for f in fs)
        return normalized(raw, sum(float(null[f]["Score"]) for f in fs), sum(len(labels[f]) for f in fs))

    part_a = [f for f in files if part[f] == "A"]
    part_b = [f for f in files if part[f] == "B"]
    best = max(grid, key=lambda t: norm(part_a, t))
    pubs = {name: published(nab_dir, d) for d, name in PEERS}

    def pub_norm(name, fs):
        raw = sum(float(pubs[name][f]["Score"]) for f in fs)
        return normalized(raw, sum(float(null[f]["Score"]) for f in fs), sum(len(labels[f]) for f in fs))

    sets = {"all": files, "A (threshold chosen here)": part_a, "B (held out)": part_b}
    sets.update({g: fs for g, fs in sorted(groups.items())})
    table = {}
    for sname, fs in sets.items():
        has_windows = sum(len(labels[f]) for f in fs) > 0
        row = {"files": len(fs)}
        if has_windows:
            row["stackscope series"] = norm(fs, best)
            for _, name in PEERS:
                row[name] = pub_norm(name, fs)
        else:  # no label windows: NAB's normalisation is undefined; the raw score (FP costs) is reported
            row["stackscope series (raw)"] = sum(per_file[f][best]["raw"] for f in fs)
            for _, name in PEERS:
                row[name + " (raw)"] = sum(float(pubs[name][f]["Score"]) for f in fs)
        table[sname] = row
    result = {
        "threshold_grid": grid,
        "threshold_chosen_on_A": best,
        "score_by_threshold": {str(t): {"A": norm(part_a, t), "B": norm(part_b, t), "all": norm(files, t)} for t in grid},
        "scorer_check": {"files_whose_scored_rows_match_nab": scorer_rows_match, "files": len(files),
                         "files_whose_null_score_is_minus_their_scored_windows": null_match},
        "table": table,
        "per_file": {f: {"part": part[f], "raw": per_file[f][best]["raw"],
                         "windows_detected": per_file[f][best]["windows_detected"],
                         "windows": per_file[f][best]["windows"], "fp": per_file[f][best]["fp"],
                         "fp_cost": per_file[f][best]["fp_cost"],
                         **{name: float(pubs[name][f]["Score"]) for _, name in PEERS}} for f in files},
        "seconds": {"import": t_import, "analyze": t_analyze, "analyze_runs": len(files) * len(grid)},
    }
    with open(os.path.join(out_dir, "nab_cli.json"), "w") as fh:
        json.dump(result, fh, indent=1)
    with open(os.path.join(out_dir, "nab_cli.md"), "w") as fh:
        fh.write(markdown(result))
    print(json.dumps({k: result[k] for k in ("threshold_chosen_on_A", "score_by_threshold", "scorer_check", "table",
                                             "seconds")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
