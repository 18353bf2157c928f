#!/usr/bin/env bash
# Installs dependencies, builds everything and runs every test (unit, integration, fuzz smoke). Run as root:
# the eBPF and crash-safety tests need it. This is what .ci/run calls.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh build
# The BPF programs also compile for arm64 (GH200/GB200 hosts): checked here, as issue 14 asks of CI.
cmake -S . -B build -DSTACKSCOPE_BPF_ARM64_CHECK=ON >/dev/null
ninja -C build bpf_arm64_objects
# The reader's libFuzzer target, briefly, seeded with a real recording (catches crashes on corrupt files).
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DSTACKSCOPE_FUZZ=ON -DSTACKSCOPE_TESTS=OFF -DSTACKSCOPE_BENCH=OFF -DSTACKSCOPE_BPF=OFF >/dev/null
ninja -C build-fuzz recording_reader_fuzz
mkdir -p build-fuzz/corpus
build/src/cli/stackscope record --quiet --duration 1 --layers host -o build-fuzz/corpus/seed.sdb >/dev/null 2>&1 || true
build-fuzz/fuzz/recording_reader_fuzz -max_total_time="${FUZZ_SECONDS:-30}" -max_len=65536 -rss_limit_mb=2048 \
  build-fuzz/corpus 2>&1 | tail -n 3
# ctest prints the closing "tests passed" line CI reads.
cd build && ctest --output-on-failure --timeout 600 -j1
