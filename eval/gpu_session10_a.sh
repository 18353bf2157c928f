#!/usr/bin/env bash
# Session 10, GPU step A (one H100): incident benchmark v2 on a held-out seed (never recorded before), settings of
# this commit (record --detect, defaults otherwise). The recordings come back too (xz, one archive), so the merged
# engine of this session can be scored on them offline without re-recording.
# Usage (device tool, repo root): SEED=41 bash eval/gpu_session10_a.sh
set -u
seed=${SEED:-41}
bash eval/incidents/gpu_v2_1gpu.sh $OUT/v2 $seed --detect > $OUT/v2.log 2>&1
tail -30 $OUT/v2.log
# The recordings, with their fault logs (named as score.py expects), for offline re-scoring.
(cd /tmp/v2_1gpu && find . -name '*.sdb' -o -name '*.faults.jsonl' -o -name '*.detect.jsonl' | sort > files.txt &&
  tar -cJf $OUT/sdb_s$seed.tar.xz -T files.txt files.txt)
ls -la $OUT
