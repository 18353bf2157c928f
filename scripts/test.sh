#!/usr/bin/env bash
# Installs dependencies, builds everything and runs every test (unit, integration, fuzz smoke). Run as root:
# the eBPF and crash-safety tests need it. This is what .ci/run calls.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh build
# The BPF programs also compile for arm64 (GH200/GB200 hosts): checked here, in CI.
cmake -S . -B build -DSTACKSCOPE_BPF_ARM64_CHECK=ON >/dev/null
ninja -C build bpf_arm64_objects
# The readers' libFuzzer targets, briefly each (catches crashes on corrupt files): the recording reader seeded
# with a real recording, the CSV, Kineto and step-table readers with fuzz/corpus/<target>/ (which also keeps the
# inputs of past findings). New inputs go to
# build-fuzz/corpus-<target>; a crash, leak, hang or undefined behaviour (UBSan halts) fails the script (pipefail).
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DSTACKSCOPE_FUZZ=ON -DSTACKSCOPE_TESTS=OFF -DSTACKSCOPE_BENCH=OFF -DSTACKSCOPE_BPF=OFF >/dev/null
ninja -C build-fuzz recording_reader_fuzz csv_reader_fuzz kineto_reader_fuzz step_table_fuzz
mkdir -p build-fuzz/corpus
build/src/cli/stackscope record --quiet --force --duration 1 --layers host -o build-fuzz/corpus/seed.sdb >/dev/null 2>&1 || true
build-fuzz/fuzz/recording_reader_fuzz -max_total_time="${FUZZ_SECONDS:-15}" -max_len=65536 -rss_limit_mb=2048 \
  build-fuzz/corpus fuzz/corpus/recording_reader 2>&1 | tail -n 3
for target in csv_reader kineto_reader step_table; do
  mkdir -p "build-fuzz/corpus-$target"
  build-fuzz/fuzz/${target}_fuzz -max_total_time="${FUZZ_SECONDS:-15}" -max_len=65536 -rss_limit_mb=2048 -timeout=10 \
    "build-fuzz/corpus-$target" "fuzz/corpus/$target" 2>&1 | tail -n 3
done
# ctest prints the closing "tests passed" line CI reads.
cd build && ctest --output-on-failure --timeout 600 -j1
