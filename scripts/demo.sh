#!/usr/bin/env bash
# The main job: installs, builds, records the bundled CPU training workload for ~20 s with every layer this
# machine supports, then analyses the recording and prints the report.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh build >/dev/null
out=${OUT:-demo.sdb}
# --force: a second run of the demo replaces its own earlier recording (record refuses an existing file otherwise)
build/src/cli/stackscope record --force -o "$out" -- /usr/bin/python3 workloads/cpu_train.py --seconds 20
build/src/cli/stackscope info "$out"
build/src/cli/stackscope analyze "$out"
