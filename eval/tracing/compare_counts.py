#!/usr/bin/env python3
"""Compares what stackscope recorded with torch.profiler's ground truth (eval/tracing/gpu_validate.py) over the
same window of steps, per rank: kernel launches, cudaMalloc/cudaFree calls and NCCL collectives.

  stackscope export REC --format csv --what events -o events.csv
  python3 eval/tracing/compare_counts.py --validate DIR --events events.csv [--json OUT]"""
import argparse
import collections
import csv
import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from api_names import LAUNCH_APIS, api_name  # noqa: E402

NCCL_COLL = {"ncclAllReduce", "ncclAllGather", "ncclReduceScatter", "ncclBroadcast", "ncclReduce", "ncclSend",
             "ncclRecv", "ncclAllToAll"}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--validate", required=True)
    ap.add_argument("--events", required=True)
    ap.add_argument("--json")
    args = ap.parse_args()
    truths = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(args.validate, "validate_rank*.json")))]
    if not truths:
        sys.exit(f"no validate_rank*.json in {args.validate}")
    windows = {t["pid"]: (t["window"]["start_ns"], t["window"]["end_ns"]) for t in truths}
    seen = {pid: collections.Counter() for pid in windows}
    nccl_bytes = {pid: 0 for pid in windows}
    with open(args.events) as f:
        for row in csv.DictReader(f):
            pid = int(row["pid"])
            if pid not in windows:
                continue
            t = int(row["start_ns"])
            lo, hi = windows[pid]
            if not lo <= t <= hi:
                continue
            name = api_name(row["name"])
            if row["layer"] == "cuda":
                if name in LAUNCH_APIS:
                    seen[pid]["kernel_launch_calls"] += 1
                elif name in ("cudaMalloc", "cudaFree"):
                    seen[pid][name] += 1
            elif row["layer"] == "nccl" and name in NCCL_COLL:
                seen[pid]["nccl_calls"] += 1
                for kv in row["args"].split(";"):
                    if kv.startswith("bytes="):
                        nccl_bytes[pid] += int(kv[6:])
    report = []
    ok = True
    for t in truths:
        pid = t["pid"]
        for key in ("kernel_launch_calls", "cudaMalloc", "cudaFree", "nccl_calls"):
            truth, got = t["counts"][key], seen[pid][key]
            match = 1.0 if truth == got else (min(truth, got) / max(truth, got) if max(truth, got) else 1.0)
            ok &= match >= 0.999
            report.append({"rank": t["rank"], "what": key, "torch_profiler": truth, "stackscope": got,
                           "match": round(match, 5)})
        report.append({"rank": t["rank"], "what": "nccl_bytes", "stackscope": nccl_bytes[pid],
                       "expected": t.get("expected_nccl_bytes")})
    for r in report:
        print(json.dumps(r))
    if args.json:
        json.dump(report, open(args.json, "w"), indent=1)
    print("ALL MATCH >= 99.9%" if ok else "MISMATCH", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
