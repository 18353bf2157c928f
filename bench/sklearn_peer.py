#!/usr/bin/python3
"""scikit-learn on the same data as bench/gmm_bench --peer DIR (run with /usr/bin/python3, one thread).

Reads DIR/engine.json for the shapes and files, times scikit-learn the same way (best of 3, process CPU time)
and writes DIR/sklearn.json.
"""
import json
import os
import sys
import time

import numpy as np
import sklearn
from sklearn.ensemble import IsolationForest
from sklearn.mixture import GaussianMixture


def best_of(reps, fn):
    best_cpu, best_wall, result = float("inf"), float("inf"), None
    for _ in range(reps):
        c0, w0 = time.process_time(), time.perf_counter()
        result = fn()
        best_cpu = min(best_cpu, time.process_time() - c0)
        best_wall = min(best_wall, time.perf_counter() - w0)
    return best_cpu, best_wall, result


def load(d, name, n, cols):
    return np.fromfile(os.path.join(d, name), dtype=np.float64).reshape(n, cols)


def main(d):
    eng = json.load(open(os.path.join(d, "engine.json")))
    out = {"sklearn": sklearn.__version__, "numpy": np.__version__, "fit": {"runs": {}}, "score": {}}
    f = eng["fit"]
    n, dim, k, iters = f["n"], f["d"], f["k"], f["iterations"]
    x = load(d, f["file"], n, dim)
    for tag, cov in (("full", "full"), ("diag", "diag")):
        w = np.fromfile(os.path.join(d, f"init_{tag}_weights.f64"))
        mu = load(d, f"init_{tag}_means.f64", k, dim)
        prec = np.fromfile(os.path.join(d, f"init_{tag}_precisions.f64"))
        prec = prec.reshape(k, dim, dim) if cov == "full" else prec.reshape(k, dim)

        def fit():
            gm = GaussianMixture(n_components=k, covariance_type=cov, tol=0.0, max_iter=iters, n_init=1,
                                 reg_covar=1e-6, weights_init=w, means_init=mu, precisions_init=prec)
            import warnings
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "did not converge": tol=0 runs exactly max_iter iterations
                gm.fit(x)
            return gm

        cpu, wall, gm = best_of(3, fit)
        out["fit"]["runs"][tag] = {"iterations": int(gm.n_iter_), "mean_log_likelihood": float(gm.score(x)),
                                   "cpu_s": cpu, "wall_s": wall, "cpu_s_per_iteration": cpu / gm.n_iter_}
    for key, s in eng["score"].items():
        xs = load(d, s["file"], s["n"], s["d"])
        gm = GaussianMixture(n_components=s["k"], covariance_type="full", max_iter=20, random_state=0).fit(xs[:20000])
        cpu, wall, _ = best_of(3, lambda: gm.score_samples(xs))
        out["score"][key] = {"cpu_s": cpu, "wall_s": wall, "points_per_s_cpu": s["n"] / cpu}
    i = eng["iforest"]
    xi = load(d, i["file"], i["n"], i["d"])
    forest = IsolationForest(n_estimators=i["trees"], max_samples=i["max_samples"], random_state=0)
    fit_cpu, _, _ = best_of(3, lambda: forest.fit(xi))
    cpu, wall, _ = best_of(3, lambda: forest.score_samples(xi))
    out["iforest"] = {"fit_cpu_s": fit_cpu, "score_cpu_s": cpu, "score_wall_s": wall,
                      "points_per_s_cpu": i["n"] / cpu}
    json.dump(out, open(os.path.join(d, "sklearn.json"), "w"), indent=2)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main(sys.argv[1])
