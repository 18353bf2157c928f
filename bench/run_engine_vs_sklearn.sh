#!/usr/bin/env bash
# Engine vs scikit-learn on the same data, one core each, in the same run:
#   GMM EM time per iteration at equal log-likelihood, GMM scoring throughput, Isolation Forest scoring.
# Usage: bench/run_engine_vs_sklearn.sh [BUILD_DIR]   (needs BUILD_DIR/bench/gmm_bench; /usr/bin/python3 with
# scikit-learn). Prints the ratios; the raw figures stay in the temporary directory it names.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:-$here/../build}"
bench="$build/bench/gmm_bench"
[[ -x "$bench" ]] || { echo "no $bench: build the gmm_bench target first" >&2; exit 1; }
dir="$(mktemp -d /tmp/engine-vs-sklearn.XXXXXX)"
# One core for both: numpy/OpenBLAS/OpenMP limited to one thread, both pinned to the same CPU.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
cpu="$(taskset -pc $$ | sed 's/.*: *//; s/[,-].*//')"
taskset -c "$cpu" "$bench" --peer "$dir" > "$dir/engine.out"
taskset -c "$cpu" /usr/bin/python3 "$here/sklearn_peer.py" "$dir" > "$dir/sklearn.out"
/usr/bin/python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
e = json.load(open(f"{d}/engine.json")); s = json.load(open(f"{d}/sklearn.json"))
print(f"data and raw timings: {d}  (engine kernel: {e['kernel']}, scikit-learn {s['sklearn']}; CPU time, best of 3)")
f = e["fit"]
print(f"GMM fit, n={f['n']} d={f['d']} K={f['k']}, {f['iterations']} EM iterations from the same initial parameters:")
for tag in ("full", "diag"):
    a, b = e["fit"]["runs"][tag], s["fit"]["runs"][tag]
    rel = abs(a["mean_log_likelihood"] - b["mean_log_likelihood"]) / abs(b["mean_log_likelihood"])
    print(f"  {tag:4}: engine {a['cpu_s_per_iteration']*1e3:8.2f} ms/iter, sklearn {b['cpu_s_per_iteration']*1e3:8.2f} ms/iter"
          f"  -> {b['cpu_s_per_iteration']/a['cpu_s_per_iteration']:5.1f}x faster;"
          f" mean log-lik {a['mean_log_likelihood']:.6f} vs {b['mean_log_likelihood']:.6f} (rel diff {rel:.2e})")
print("GMM scoring, 1M points, K=4 (engine: density under the most likely component; sklearn: score_samples):")
for key, a in e["score"].items():
    b = s["score"][key]
    print(f"  {key:4}: engine {a['points_per_s_cpu']/1e6:7.2f} M points/s, sklearn {b['points_per_s_cpu']/1e6:6.2f} M points/s"
          f"  -> {a['points_per_s_cpu']/b['points_per_s_cpu']:5.1f}x")
a, b = e["iforest"], s["iforest"]
print(f"Isolation Forest scoring, n={a['n']} d={a['d']}, 100 trees x 256 samples: engine {a['points_per_s_cpu']/1e6:.2f} M points/s,"
      f" sklearn {b['points_per_s_cpu']/1e6:.3f} M points/s -> {a['points_per_s_cpu']/b['points_per_s_cpu']:.1f}x")
PY
