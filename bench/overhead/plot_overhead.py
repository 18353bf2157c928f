"""Figure: step-time overhead of each recorder configuration against the workload's call rate, one point per
workload x layer set, from the WORKLOAD.json files run_overhead.sh writes. The x axis is CUDA API calls/s for GPU
workloads and aten operator calls/s for CPU ones (both from torch.profiler on the bare run); symlog y, since
overheads run from about 0 to several hundred per cent.

  /usr/bin/python3 bench/overhead/plot_overhead.py RESULTS_DIR_OR_JSON... -o docs/overhead_vs_calls.svg

Needs matplotlib (Debian: python3-matplotlib)."""
import argparse
import glob
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MARKERS = {"nvml,host": "s", "cuda,nccl,nvml,host": "^", "default": "o", "default --detail full": "D"}


def load(paths):
    out = []
    for p in paths:
        files = sorted(glob.glob(os.path.join(p, "*.json"))) if os.path.isdir(p) else [p]
        for f in files:
            try:
                with open(f) as fh:
                    s = json.load(fh)
            except (OSError, json.JSONDecodeError):
                continue
            if isinstance(s, dict) and "rows" in s and "workload" in s:
                out.append(s)
    return out


def rate(s):
    c = s.get("calls") or {}
    if c.get("cuda_calls_per_s"):
        return c["cuda_calls_per_s"], "CUDA calls/s"
    if c.get("ops_per_s"):
        return c["ops_per_s"], "operator calls/s"
    return None, None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", help="WORKLOAD.json files or directories of them")
    ap.add_argument("-o", "--out", required=True, help=".svg or .png")
    ap.add_argument("--title", default="stackscope record: step-time overhead against call rate")
    a = ap.parse_args()
    results = load(a.inputs)
    if not results:
        raise SystemExit("no run_overhead.sh JSON results in " + " ".join(a.inputs))
    fig, ax = plt.subplots(figsize=(8, 5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    seen_cfg = set()
    plotted = 0
    xs, ys = [], []
    for i, s in enumerate(results):
        x, unit = rate(s)
        if not x:
            print(f"{s['workload']}: no call rate in its JSON (no CALLS line), left out")
            continue
        color = colors[i % len(colors)]
        ax.annotate(f"{s['workload']}\n({unit})", (x, 0), textcoords="offset points", xytext=(4, -26), fontsize=7,
                    color=color)
        for r in s["rows"]:
            if r["config"] == "bare" or r.get("overhead") is None:
                continue
            m = MARKERS.get(r["config"], "x")
            label = r["config"] if r["config"] not in seen_cfg else None
            seen_cfg.add(r["config"])
            ax.scatter([x], [r["overhead"] * 100], marker=m, color=color, s=40, label=label, edgecolors="black",
                       linewidths=0.4)
            plotted += 1
            xs.append(x)
            ys.append(r["overhead"] * 100)
    if not plotted:
        raise SystemExit("no point to draw (no call rates or no traced rows)")
    ax.set_xscale("log")
    ax.set_yscale("symlog", linthresh=1)
    ax.set_xlim(min(xs) / 3, max(xs) * 3)
    ax.set_ylim(min(-5.0, min(ys) * 1.5), max(10.0, max(ys) * 2))
    ax.axhline(0, color="grey", lw=0.6)
    for target in (1, 2, 5):  # the cost targets, %: GPT-2, launch-bound, CPU tiny operators
        ax.axhline(target, color="grey", lw=0.4, ls=":")
        ax.annotate(f"{target} %", (min(xs) / 3, target), fontsize=6, color="grey", xytext=(2, 1),
                    textcoords="offset points")
    ax.set_xlabel("calls/s of the workload, bare (CUDA API calls on GPU, aten operator calls on CPU)")
    ax.set_ylabel("median step time vs bare (%)")
    ax.set_title(a.title, fontsize=10)
    ax.legend(title="recorder configuration (marker); colour = workload", fontsize=7, title_fontsize=7)
    machines = sorted({s.get("machine", "") for s in results})
    fig.text(0.01, 0.01, "; ".join(machines), fontsize=6, color="grey")
    fig.tight_layout()
    fig.savefig(a.out)
    print(f"{plotted} points from {len(results)} workloads -> {a.out}")


if __name__ == "__main__":
    main()
