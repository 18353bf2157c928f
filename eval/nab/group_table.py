#!/usr/bin/env python3
"""Per group and part (all / A / B) NAB standard scores of two nab_cli_eval.py runs side by side (before -> after),
with windows found and false positives, as a markdown table for docs/benchmarks/host-series-nab.md. Each run at its
own threshold (the one it chose on part A). Groups without label windows: the raw score (their false positives' cost).

usage: group_table.py NAB_DIR BEFORE/nab_cli.json AFTER/nab_cli.json
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nab_cli_eval import published  # noqa: E402
from nab_scoring import normalized  # noqa: E402


def cell(run, fs, null, labels):
    pf = run["per_file"]
    raw = sum(pf[f]["raw"] for f in fs)
    wins = sum(len(labels[f]) for f in fs)
    score = (f"{normalized(raw, sum(float(null[f]['Score']) for f in fs), wins):.1f}" if wins
             else f"raw {raw:.2f}")
    found = sum(pf[f]["windows_detected"] for f in fs)
    scored = sum(pf[f]["windows"] for f in fs)
    fp = sum(pf[f]["fp"] for f in fs)
    return score, f"{found}/{scored}", fp


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    nab_dir, before_path, after_path = sys.argv[1:]
    labels = json.load(open(os.path.join(nab_dir, "combined_windows.json")))
    null = published(nab_dir, "null")
    before, after = json.load(open(before_path)), json.load(open(after_path))
    files = sorted(labels)
    groups = {}
    for f in files:
        groups.setdefault(f.split("/")[0], []).append(f)
    rows = [("all 45 files", files)]
    for g, fs in sorted(groups.items()):
        rows.append((g, fs))
    print(f"thresholds chosen on A: before {before['threshold_chosen_on_A']}, after {after['threshold_chosen_on_A']}")
    print("| files | part | files | before | after | windows before -> after | FP before -> after |")
    print("|---|---|---|---|---|---|---|")
    for name, fs in rows:
        for part in ("all", "A", "B"):
            sel = [f for f in fs if part == "all" or before["per_file"][f]["part"] == part]
            if not sel:
                continue
            b, a = cell(before, sel, null, labels), cell(after, sel, null, labels)
            print(f"| {name} | {part} | {len(sel)} | {b[0]} | {a[0]} | {b[1]} -> {a[1]} | {b[2]} -> {a[2]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
