"""NAB's standard scoring (numenta/NAB nab/sweeper.py, nab/runner.py normalisation), restated for stackscope's
evaluation: per file, each row's weighted score (a scaled sigmoid of its position in or after a label window),
the first 15 % of rows (at most 750) probationary, the best detection per window counted, each miss -A_FN, each
detection outside a window A_FP times its sigmoid. A corpus score is normalised as NAB does: 100 * (raw - null) /
(perfect - null), null = the null detector's raw score (every scored window missed), perfect = A_TP x labelled
windows. Standard profile: A_TP 1, A_FP 0.11, A_FN 1.
"""
import math

STANDARD = {"tp": 1.0, "fp": 0.11, "fn": 1.0}


def scaled_sigmoid(x):
    if x >= 3.0:
        return -1.0
    return 2.0 / (1.0 + math.exp(5.0 * x)) - 1.0


def sweep(timestamps, windows, profile=STANDARD):
    """Per row: (weighted score, window name or None, or 'probationary'). timestamps: the file's rows as written
    (strings compare as NAB compares them); windows: [(start, end)] in the same form, in time order."""
    windows = list(windows)
    out = []
    max_tp = scaled_sigmoid(-1.0)
    probation = min(math.floor(0.15 * len(timestamps)), 0.15 * 5000)
    cur = name = width = right = None
    prev_right = prev_width = None
    for i, t in enumerate(timestamps):
        if windows and t == windows[0][0]:
            cur = windows.pop(0)
            name = cur[0]
            right = timestamps.index(cur[1])
            width = float(right - timestamps.index(cur[0]) + 1)
        if cur is not None:
            w = scaled_sigmoid(-(right - i + 1) / width) * profile["tp"] / max_tp
        else:
            pos = 3.0 if prev_right is None else abs(prev_right - i) / float(prev_width - 1)
            w = scaled_sigmoid(pos) * profile["fp"]
        out.append((w, name if i >= probation else "probationary"))
        if cur is not None and t == cur[1]:
            prev_right, prev_width = i, width
            cur = name = width = right = None
    return out


def score_file(swept, detected_rows, profile=STANDARD):
    """Raw NAB score of one file given the set of rows with a detection; also windows detected, scored windows,
    detections outside windows and what they cost."""
    best = {n: -profile["fn"] for _, n in swept if n not in ("probationary", None)}
    hit = set()
    fp = 0.0
    fp_rows = 0
    for i in sorted(detected_rows):
        w, n = swept[i]
        if n == "probationary":
            continue
        if n is None:
            fp += w
            fp_rows += 1
        else:
            best[n] = max(best[n], w)
            hit.add(n)
    return fp + sum(best.values()), len(hit), len(best), fp_rows, -fp


def normalized(raw_total, null_total, label_windows, profile=STANDARD):
    perfect = profile["tp"] * label_windows
    return 100.0 * (raw_total - null_total) / (perfect - null_total) if perfect != null_total else 0.0
