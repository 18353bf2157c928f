#!/usr/bin/env bash
# Table I from window features and injection logs written by eval/faults/gpu_table1.sh (the kept H200 runs are in
# eval/faults/data). Needs python3-sklearn, python3-xgboost, python3-matplotlib from Debian; about 1.5 min.
# Usage: eval/faults/run_table1.sh [STACKSCOPE] [OUTDIR] [DATA] [SEED]
#   BASELINE=S (default 30): features become departures from the job's own baseline, the S s before and after
#     each window, in robust deviations (`stackscope features X.csv --baseline S --baseline-scale mad`);
#     BASELINE=0: the raw features (the first table). BASELINE_ARGS overrides the other baseline options.
#   FOLDS=K (default 5), QUANTILE=Q (default 1.0): the clean period is cut into K contiguous folds, each scored by a
#     model fitted on the others, and the threshold is the Q-quantile of those out-of-fold scores (1.0: above every
#     clean window); the model that scores the test is fitted on the whole clean period. FOLDS=0: fit on the first
#     70 % and take the quantile of the last 30 % (the first table's rule, with QUANTILE=0.99).
#   SCALE_FLOOR=F (default 1, with a baseline): every detector standardises by at least F (--min-scale-abs).
#   ONLINE=1: unsupervised methods run as stackscope's online scorer instead (`detect --online`, horizon HORIZON
#     s, default 90, refit every REFIT s, default 5; flagged windows left out of later fits unless KEEP_FLAGGED=1).
set -euo pipefail
cd "$(dirname "$0")/../.."
S=${1:-build/src/cli/stackscope}; out=${2:-eval/faults/results}; D=${3:-eval/faults/data}; seed=${4:-7}
baseline=${BASELINE:-30}; baseline_args=${BASELINE_ARGS:---baseline-side both --baseline-scale mad}
quantile=${QUANTILE:-1.0}; folds=${FOLDS:-5}
mkdir -p "$out/features"
for group in gpu nccl; do
  log=$D/faults_${group}_${seed}.jsonl
  [[ -f $log ]] || { echo "no $log: $group table skipped" >&2; continue; }
  specs=()
  for f in "$D/${group}_${seed}"_*.csv; do
    layer=${f##*_}; layer=${layer%.csv}
    if [[ $baseline != 0 ]]; then
      # shellcheck disable=SC2086  # baseline_args is a list of options
      "$S" features "$f" --baseline "$baseline" $baseline_args -o "$out/features/${f##*/}" >/dev/null
      f=$out/features/${f##*/}
    fi
    specs+=(--features "$layer=$f")
  done
  # Diagonal covariance: a full 47 x 47 covariance per component from ~180 clean windows overfits (results with
  # full covariance: docs/benchmarks/gmm.md, "Tried and rejected").
  # Departures are robust z-scores, and the both-sided rule sets most clean ones to exactly 0, so a column can
  # look far steadier in the clean period than its own baseline's spread: a GPU temperature that did not move for
  # 90 s made a 1 degree dip after a fault a 20-sigma event. So every method standardises by at least one robust
  # sigma (SCALE_FLOOR, default 1; 0: the detector's default floor, as in the seed 7 table).
  floor=${SCALE_FLOOR:-1}; floor_args=()
  [[ $baseline != 0 && $floor != 0 ]] && floor_args=(--detect-arg=--min-scale-abs --detect-arg="$floor")
  online_args=()
  if [[ ${ONLINE:-0} != 0 ]]; then
    online_args=(--online --horizon "${HORIZON:-90}" --refit "${REFIT:-5}")
    [[ ${KEEP_FLAGGED:-0} != 0 ]] && online_args+=(--keep-flagged)
  fi
  /usr/bin/python3 eval/faults/table1.py --stackscope "$S" --log "$log" "${specs[@]}" --quantile "$quantile" \
    --folds "$folds" "${floor_args[@]}" "${online_args[@]}" \
    --detect-arg=--covariance --detect-arg=diag --out "$out/$group"
done
