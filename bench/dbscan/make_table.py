"""Writes a ROWS x 16 numeric CSV for bench/dbscan/dbscan_scale.sh (deterministic, seed 1).
structured: 3 latent factors mixed into 16 columns plus 5 % noise (window features: a few factors, many
near-identical rows); noise: i.i.d. standard normal columns (no structure for a spatial index to use).
Usage: /usr/bin/python3 make_table.py structured|noise ROWS OUT.csv"""
import sys

import numpy as np

kind, rows, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rng = np.random.default_rng(1)
if kind == "structured":
    mix = rng.standard_normal((3, 16))
    x = rng.standard_normal((rows, 3)) @ mix + 0.05 * rng.standard_normal((rows, 16))
elif kind == "noise":
    x = rng.standard_normal((rows, 16))
else:
    sys.exit("kind must be structured or noise")
np.savetxt(path, x, delimiter=",", fmt="%.6g", header=",".join(f"c{i}" for i in range(16)), comments="")
