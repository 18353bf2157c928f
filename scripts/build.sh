#!/usr/bin/env bash
# Configures and builds stackscope (Release with debug info) into build/. Usage: scripts/build.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTACKSCOPE_WERROR=ON >/dev/null
ninja -C "$dir" -j"$(nproc)"
echo "built: $dir/src/cli/stackscope"
