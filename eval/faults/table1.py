#!/usr/bin/env python3
"""eACGM Table I, reproduced: per-layer accuracy, precision, recall and F1 of GMM and its baselines on windows of a
fault-injected training run (eval/faults/fault_train.py), plus the GMM sensitivity to K and to the threshold (Fig. 5).

Inputs: the per-layer window features that `stackscope features REC --layer L --window W -o L.csv` wrote (one row
per window: t0_ns, t1_ns, features) and the workload's injection log. stackscope never sees the log; it only labels
the windows here:
  positive  the window overlaps an episode of a fault class of this layer for at least half its length
  negative  the window overlaps no episode of any class, and does not start within --guard windows after one ends
  left out  everything else (other layers' faults, the transitions around an episode), for this layer's figures
Unsupervised methods (stackscope detect: gmm, kmeans, iforest, dbscan, zscore, pca) are fitted on the clean period
that precedes every fault and flag test windows above the --quantile of their training scores (dbscan: its noise
rule). The supervised rows (XGBoost, SVM, Random Forest: scikit-learn / xgboost from Debian) see the labels:
stratified 5-fold cross-validation over the test windows, as an upper reference.

  /usr/bin/python3 eval/faults/table1.py --stackscope build/src/cli/stackscope \
      --log RUN/faults.jsonl --features cuda=RUN/cuda.csv --features torch=RUN/torch.csv ... --out OUTDIR
Writes OUTDIR/table1.md, table1.json, sensitivity.md and fig5.png (when matplotlib is there).
"""
import argparse
import csv
import glob
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

UNSUPERVISED = ["kmeans", "iforest", "dbscan", "zscore", "pca", "gmm"]
SUPERVISED = ["xgboost", "svm", "random_forest"]
ROW_NAMES = {"cuda": "Latency (CUDA)", "python": "Latency (Python)", "torch": "Latency (Torch)",
             "nvml": "Hardware", "nccl": "NCCL"}


def read_log(paths):
    metas, episodes = [], []
    for p in paths:
        for line in open(p):
            line = line.strip()
            if not line:
                continue
            rec = json.loads(line)
            (metas if rec["kind"] == "meta" else episodes).append(rec)
    if not metas:
        raise SystemExit(f"no meta line in {paths}")
    return metas, episodes


def read_features(path):
    with open(path) as f:
        rows = list(csv.reader(f))
    if len(rows) < 2:
        raise SystemExit(f"{path}: no windows")
    head = rows[0]
    if head[:2] != ["t0_ns", "t1_ns"]:
        raise SystemExit(f"{path}: the first columns must be t0_ns,t1_ns (got {head[:2]})")
    t = np.array([[int(r[0]), int(r[1])] for r in rows[1:]], dtype=np.int64)
    x = np.array([[float(v) for v in r[2:]] for r in rows[1:]], dtype=float)
    return head[2:], t, x


def label_windows(t, layer, metas, episodes, guard):
    """Per window: 1 positive, 0 negative, -1 left out; and the split: 'train', 'test' or ''."""
    start = max(m["start_ns"] for m in metas)
    clean_until = min(m["clean_until_ns"] for m in metas)
    end = min(m["end_ns"] for m in metas)
    width = np.median(t[:, 1] - t[:, 0])
    label = np.zeros(len(t), dtype=int)
    split = np.array([""] * len(t), dtype=object)
    for i, (a, b) in enumerate(t):
        if a >= start and b <= clean_until:
            split[i] = "train"
        elif a >= clean_until and b <= end:
            split[i] = "test"
        for e in episodes:
            ov = min(b, e["t1_ns"]) - max(a, e["t0_ns"])
            if e["layer"] == layer and ov >= 0.5 * (b - a):
                label[i] = 1
                break
            if ov > 0 or e["t1_ns"] <= a < e["t1_ns"] + guard * width:
                label[i] = -1
    return label, split


def write_csv(path, names, x):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(names)
        for r in x:
            w.writerow([repr(float(v)) for v in r])


def detect(stackscope, method, names, train, test, tmp, extra):
    tr, te, sc = (os.path.join(tmp, n) for n in ("train.csv", "test.csv", "scores.csv"))
    write_csv(tr, names, train)
    write_csv(te, names, test)
    cmd = [stackscope, "detect", "--method", method, "--train", tr, "--input", te, "--output", sc] + extra
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    with open(sc) as f:
        rows = list(csv.DictReader(f))
    return np.array([float(r["score"]) for r in rows]), np.array([int(r["anomaly"]) for r in rows])


def calibrated(args, method, names, train, test, tmp, extra):
    """Fit on the first part of the clean period, set the threshold at --quantile of the scores of its held-out last
    --calibrate share (in-sample scores are optimistic: a model scores the rows it was fitted on too well)."""
    n_fit = int(round(len(train) * (1 - args.calibrate)))
    fit, held = train[:n_fit], train[n_fit:]
    if len(held) == 0:
        held = fit
    held_scores, _ = detect(args.stackscope, method, names, fit, held, tmp, extra)
    test_scores, _ = detect(args.stackscope, method, names, fit, test, tmp, extra)
    return (test_scores > np.quantile(held_scores, args.quantile)).astype(int)


def cross_fitted(args, method, names, train, test, tmp, extra):
    """Threshold from out-of-fold scores: the clean period cut into --folds contiguous blocks, each scored by a model
    fitted on the other blocks; the threshold is --quantile of all those scores (one per clean window), and the model
    that scores the test windows is fitted on the whole clean period. Every clean window informs both the model and
    the threshold, where --calibrate spends 30 % of them on the threshold only."""
    bounds = np.linspace(0, len(train), args.folds + 1).round().astype(int)
    held = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        rest = np.r_[train[:a], train[b:]]
        scores, _ = detect(args.stackscope, method, names, rest, train[a:b], tmp, extra)
        held.append(scores)
    test_scores, _ = detect(args.stackscope, method, names, train, test, tmp, extra)
    return (test_scores > np.quantile(np.concatenate(held), args.quantile)).astype(int)


def online(args, method, names, x, t, split, keep, tmp, extra):
    """The online mode, as stackscope runs it (`detect --online`, analyze/online_scorer.h): windows in time order,
    the clean period first (not scored), each window scored by the model of the --horizon seconds before it,
    refitted every --refit seconds, the threshold the --quantile of the horizon's own scores; windows the model
    flagged stay out of later fits unless --keep-flagged (no labels involved either way)."""
    tr, te, sc = (os.path.join(tmp, n) for n in ("online_train.csv", "online_test.csv", "online_scores.csv"))
    train, test = split == "train", split == "test"
    write_csv(tr, ["t0_s"] + names, np.c_[t[train, 0] / 1e9, x[train]])
    write_csv(te, ["t0_s"] + names, np.c_[t[test, 0] / 1e9, x[test]])
    cmd = [args.stackscope, "detect", "--method", method, "--online", "--time-column", "t0_s", "--train", tr,
           "--input", te, "--output", sc, "--horizon", str(args.horizon), "--refit-every", str(args.refit),
           "--quantile", str(args.quantile)] + ([] if args.keep_flagged else ["--exclude-flagged"]) + extra
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    with open(sc) as f:
        flagged = np.array([int(row["anomaly"]) for row in csv.DictReader(f)])
    return flagged[keep[test]]


def metrics(y, p):
    tp = int(((y == 1) & (p == 1)).sum())
    tn = int(((y == 0) & (p == 0)).sum())
    fp = int(((y == 0) & (p == 1)).sum())
    fn = int(((y == 1) & (p == 0)).sum())
    prec = tp / (tp + fp) if tp + fp else 0.0
    rec = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
    return {"accuracy": (tp + tn) / max(1, len(y)), "precision": prec, "recall": rec, "f1": f1,
            "tp": tp, "fp": fp, "tn": tn, "fn": fn}


def supervised(name, x, y, seed):
    from sklearn.model_selection import StratifiedKFold, cross_val_predict
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    if name == "xgboost":
        try:
            from xgboost import XGBClassifier
        except ImportError:
            return None
        model = XGBClassifier(n_estimators=200, max_depth=4, random_state=seed, verbosity=0)
    elif name == "svm":
        from sklearn.svm import SVC
        model = make_pipeline(StandardScaler(), SVC(kernel="rbf", C=1.0, gamma="scale"))
    else:
        from sklearn.ensemble import RandomForestClassifier
        model = RandomForestClassifier(n_estimators=200, random_state=seed)
    folds = min(5, int(min((y == 1).sum(), (y == 0).sum())))
    if folds < 2:
        return None
    # Contiguous folds: adjacent windows are autocorrelated, so shuffled folds would put near-copies of a test
    # window in the training folds.
    return cross_val_predict(model, x, y, cv=StratifiedKFold(folds, shuffle=False))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stackscope", required=True)
    ap.add_argument("--log", action="append", required=True, help="injection log(s) (one per rank)")
    ap.add_argument("--features", action="append", required=True, help="LAYER=features.csv (repeat)")
    ap.add_argument("--quantile", type=float, default=0.99, help="threshold: quantile of the training scores")
    ap.add_argument("--calibrate", type=float, default=0.3,
                    help="share of the clean period held out to set thresholds (0: quantile of the fitted rows)")
    ap.add_argument("--folds", type=int, default=0,
                    help="thresholds from out-of-fold scores of this many contiguous folds of the clean period, the "
                         "model fitted on all of it (0: --calibrate's single held-out part)")
    ap.add_argument("--online", action="store_true", help="unsupervised methods refit on a sliding horizon")
    ap.add_argument("--keep-flagged", action="store_true",
                    help="online: fit on every past window, flagged or not (drift is absorbed, so are faults)")
    ap.add_argument("--horizon", type=float, default=90, help="online: seconds of past windows to fit on")
    ap.add_argument("--refit", type=float, default=5, help="online: seconds between refits")
    ap.add_argument("--guard", type=float, default=1, help="windows after an episode left out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--detect-arg", action="append", default=[], help="extra argument for every detect call")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    logs = [p for pat in args.log for p in sorted(glob.glob(pat))]
    metas, episodes = read_log(logs)
    os.makedirs(args.out, exist_ok=True)
    help_text = subprocess.run([args.stackscope, "detect", "--help"], capture_output=True, text=True).stdout
    extra = list(args.detect_arg)
    if "--constant-columns" in help_text and not any(a.startswith("--constant-columns") for a in extra):
        extra += ["--constant-columns", "floor"]

    results, sens = {}, {}
    for spec in args.features:
        layer, path = spec.split("=", 1)
        names, t, x = read_features(path)
        label, split = label_windows(t, layer, metas, episodes, args.guard)
        train = x[(split == "train")]
        keep = (split == "test") & (label >= 0)
        test, y = x[keep], label[keep]
        info = {"windows": int(len(t)), "train": int(len(train)), "test": int(len(y)),
                "positives": int(y.sum()), "features": len(names),
                "faults": sorted({e["fault"] for e in episodes if e["layer"] == layer})}
        print(f"{layer}: {info}", file=sys.stderr)
        if y.sum() == 0 or len(train) < 8:
            results[layer] = {"info": info, "skipped": "no positive windows or too little training data"}
            continue
        res = {"info": info, "methods": {}}
        with tempfile.TemporaryDirectory() as tmp:
            for m in UNSUPERVISED:
                try:
                    if args.online and m != "dbscan":
                        pred = online(args, m, names, x, t, split, keep, tmp, extra)
                    elif args.folds > 1 and m != "dbscan":
                        pred = cross_fitted(args, m, names, train, test, tmp, extra)
                    elif args.calibrate > 0 and m != "dbscan":
                        pred = calibrated(args, m, names, train, test, tmp, extra)
                    else:
                        q = [] if m == "dbscan" else ["--quantile", str(args.quantile)]
                        _, pred = detect(args.stackscope, m, names, train, test, tmp, q + extra)
                    res["methods"][m] = metrics(y, pred)
                except RuntimeError as e:
                    res["methods"][m] = {"error": str(e)}
            for m in SUPERVISED:
                pred = supervised(m, test, y, args.seed)
                if pred is not None:
                    res["methods"][m] = metrics(y, np.asarray(pred))
            # Fig. 5: GMM sensitivity to K (default threshold) and to the threshold (K by BIC).
            s = {"components": {}, "quantile": {}}
            for k in (1, 2, 3, 4, 6, 8):
                try:
                    _, pred = detect(args.stackscope, "gmm", names, train, test, tmp,
                                     ["--components", str(k), "--quantile", str(args.quantile)] + extra)
                    s["components"][k] = metrics(y, pred)
                except RuntimeError as e:
                    s["components"][k] = {"error": str(e)}
            score, _ = detect(args.stackscope, "gmm", names, train, train, tmp, ["--quantile", "0.5"] + extra)
            tscore, _ = detect(args.stackscope, "gmm", names, train, test, tmp, ["--quantile", "0.5"] + extra)
            for q in (0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 1.0):
                thr = np.quantile(score, q)
                s["quantile"][q] = dict(metrics(y, (tscore > thr).astype(int)), threshold=float(thr),
                                        delta=float(math.exp(-thr)))
            sens[layer] = s
        results[layer] = res

    with open(os.path.join(args.out, "table1.json"), "w") as f:
        json.dump({"results": results, "sensitivity": sens, "quantile": args.quantile, "guard": args.guard,
                   "logs": logs}, f, indent=1, default=str)
    methods = UNSUPERVISED[:-1] + SUPERVISED + ["gmm"]
    heads = {"kmeans": "KMeans", "iforest": "Isolation Forest", "dbscan": "DBSCAN", "zscore": "Z-score",
             "pca": "PCA-Mahalanobis", "xgboost": "XGBoost*", "svm": "SVM*", "random_forest": "Random Forest*",
             "gmm": "GMM"}
    lines = ["| Metric | Layer (windows: test / positive) | " + " | ".join(heads[m] for m in methods) + " |",
             "|---|---|" + "---|" * len(methods)]
    for metric in ("accuracy", "precision", "recall", "f1"):
        for layer, res in results.items():
            if "methods" not in res:
                continue
            cells = []
            for m in methods:
                r = res["methods"].get(m)
                cells.append("n/a" if not r or "error" in r else f"{100 * r[metric]:.1f}%")
            inf = res["info"]
            lines.append(f"| {metric} | {ROW_NAMES.get(layer, layer)} ({inf['test']} / {inf['positives']}) | "
                         + " | ".join(cells) + " |")
    with open(os.path.join(args.out, "table1.md"), "w") as f:
        rule = (f"online (`detect --online`): the {args.quantile} quantile of the last {args.horizon:g} s of windows' "
                f"scores, refitted every {args.refit:g} s, flagged windows "
                f"{'kept in' if args.keep_flagged else 'left out of'} later fits (dbscan: not online)" if args.online else
                f"the {args.quantile} quantile of out-of-fold scores of the clean period ({args.folds} contiguous folds), "
                "model fitted on all of it" if args.folds > 1 else
                f"the {args.quantile} quantile of the scores of the last {args.calibrate:.0%} of the clean period, "
                "model fitted on the rest" if args.calibrate > 0 else
                f"the {args.quantile} quantile of the clean period's own scores")
        f.write("\n".join(lines) + "\n\n* supervised: 5-fold cross-validation (contiguous folds) on the labelled test windows\n"
                f"Unsupervised threshold: {rule}.\n")
    sl = ["| Layer | " + " | ".join(f"K={k}" for k in (1, 2, 3, 4, 6, 8)) + " | " +
          " | ".join(f"q={q}" for q in (0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 1.0)) + " |",
          "|---|" + "---|" * 13]
    for layer, s in sens.items():
        cells = [("err" if "error" in s["components"][k] else f"{s['components'][k]['f1']:.3f}") for k in s["components"]]
        cells += [f"{s['quantile'][q]['f1']:.3f}" for q in s["quantile"]]
        sl.append(f"| {layer} | " + " | ".join(cells) + " |")
    with open(os.path.join(args.out, "sensitivity.md"), "w") as f:
        f.write("GMM F1 by components K (threshold: training quantile %s) and by threshold quantile (K by BIC)\n\n"
                % args.quantile + "\n".join(sl) + "\n")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
        for layer, s in sens.items():
            ks = [k for k in s["components"] if "error" not in s["components"][k]]
            ax[0].plot(ks, [s["components"][k]["f1"] for k in ks], marker="o", label=layer)
            qs = list(s["quantile"])
            ax[1].plot([1 - q + 1e-3 for q in qs], [s["quantile"][q]["f1"] for q in qs], marker="o", label=layer)
        ax[0].set_xlabel("components K")
        ax[0].set_ylabel("F1")
        ax[1].set_xscale("log")
        ax[1].set_xlabel("1 - threshold quantile (right: lower threshold, more flagged)")
        ax[1].legend()
        fig.tight_layout()
        fig.savefig(os.path.join(args.out, "fig5.png"), dpi=110)
    except ImportError:
        pass
    print(open(os.path.join(args.out, "table1.md")).read())
    print(open(os.path.join(args.out, "sensitivity.md")).read())


if __name__ == "__main__":
    main()
