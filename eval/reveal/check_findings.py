#!/usr/bin/env python3
"""Checks a `stackscope analyze --detector reveal --json` report against one injection.

usage: check_findings.py REPORT.json CASE WANT_SUBSYSTEM T0 T1 [RECORDING]
Prints the findings overlapping [T0, T1 + 3 s] (seconds from the recording's start; +3 s: a 3 s window that
starts inside the injection still shows it) and "CASE: FOUND" when one of them names WANT_SUBSYSTEM, else
"CASE: NOT FOUND". RECORDING picks one recording of a multi-recording report. Exit status 0 either way.
"""
import json
import sys

report, case, want, a, b = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
recording = sys.argv[6] if len(sys.argv) > 6 else None
j = json.load(open(report))["reveal"]
findings = [f for f in j["findings"] if recording is None or f["recording"] == recording]
findings = [f for f in findings if not f["summary"].startswith("cross-host")]
hits = [f for f in findings if f["t_end_s"] > a and f["t_start_s"] < b + 3]
for f in hits:
    ev = ", ".join(f"{e['subject']}:{e['feature']} z={e['score']:+.0f}" for e in f["evidence"][:4])
    print(f"{case}: [{f['t_start_s']:.0f}s,{f['t_end_s']:.0f}s] {f['subsystem']}: {ev}")
print(f"{case}:", "FOUND" if any(f["subsystem"] == want for f in hits) else "NOT FOUND",
      f"(want {want} in {a:.0f}-{b:.0f}s; {len(findings) - len(hits)} findings elsewhere in the recording)")
