"""NAB files, labels, NAB's sweep, part A/B (as eval/nab/nab_cli_eval.py) and the bins scan_host_series makes of an
imported file (rows sorted by time, bins of the median interval from the first row, each bin's mean and last row)."""
import csv, json, os, sys, datetime as dt
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from nab_scoring import sweep, score_file, normalized
NAB = os.environ.get('NAB_DIR', os.path.join(os.path.dirname(os.path.abspath(__file__)), '../../../../shared/data/nab'))

def epoch(ts):
    ts = ts.replace("T", " ").rstrip("Z").split(".")[0]
    return dt.datetime.strptime(ts, "%Y-%m-%d %H:%M:%S").replace(tzinfo=dt.timezone.utc).timestamp()

def pub(det):
    with open(os.path.join(NAB, "published_scores", f"{det}_standard_scores.csv")) as f:
        return {r["File"]: r for r in csv.DictReader(f)}

labels = json.load(open(os.path.join(NAB, "combined_windows.json")))
files = sorted(labels)
null = pub("null")
groups = {}
for f in files: groups.setdefault(f.split("/")[0], []).append(f)
part = {}
for g, fs in groups.items():
    for k, f in enumerate(sorted(fs)): part[f] = "A" if k % 2 == 0 else "B"

def load(f):
    rows = list(csv.reader(open(os.path.join(NAB, f))))[1:]
    ts = [r[0] for r in rows]
    tsec = [epoch(t) for t in ts]
    vals = [float(r[1]) for r in rows]
    wins = [(a.split(".")[0], b.split(".")[0]) for a, b in labels[f]]
    swept = sweep(ts, wins)
    return dict(ts=ts, tsec=tsec, vals=vals, swept=swept, wins=wins)

def bins_of(d):
    """As import --on-disorder sort + scan_host_series: rows sorted by time (stable), binned from the first time by
    the median interval; returns list of (bin, mean, last_row_index)."""
    order = sorted(range(len(d['tsec'])), key=lambda i: d['tsec'][i])
    t = [d['tsec'][i] for i in order]
    gaps = sorted(b - a for a, b in zip(t, t[1:]) if b > a)
    interval = gaps[len(gaps)//2] if gaps else 1
    bw = max(1, interval)
    t0 = t[0]
    out = []
    cur = None; s = 0; n = 0; last = None
    for i in order:
        b = int((d['tsec'][i] - t0) // bw)
        if cur is not None and b != cur:
            out.append((cur, s / n, last)); s = 0; n = 0
        cur = b; s += d['vals'][i]; n += 1; last = i
    out.append((cur, s / n, last))
    return out, bw

cache = {}
def get(f):
    if f not in cache:
        d = load(f); d['bins'], d['bw'] = bins_of(d); cache[f] = d
    return cache[f]
