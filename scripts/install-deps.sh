#!/usr/bin/env bash
# Installs everything stackscope needs to build, test and run, from Debian 12's registry only. Run as root.
set -euo pipefail
if [ "$(id -u)" != 0 ]; then echo "install-deps.sh: run as root (apt-get)" >&2; exit 1; fi
export DEBIAN_FRONTEND=noninteractive
PKGS=(
  build-essential cmake ninja-build pkg-config
  clang llvm libbpf-dev bpftool libelf-dev zlib1g-dev libzstd-dev   # eBPF: CO-RE programs and skeletons
  libsqlite3-dev sqlite3                                            # recording store
  libeigen3-dev libcli11-dev libfmt-dev nlohmann-json3-dev          # engine, CLI, output
  libnanoflann-dev                                                  # DBSCAN's kd-tree
  libboost-dev                                                      # Student's t quantile (Boost.Math, header-only)
  libprotobuf-dev protobuf-compiler                                 # Perfetto traces
  libgtest-dev libgmock-dev libbenchmark-dev                        # tests and benchmarks
  python3 python3-torch python3-numpy python3-sklearn python3-xgboost python3-matplotlib             # real CPU workloads and peers (Debian's, not PyPI)
  procps util-linux ccache
  prometheus-cpp-dev libcivetweb-dev libtomlplusplus-dev prometheus curl   # node agent: /metrics, HTTP, config; its tests scrape with a real Prometheus
  libre2-dev libutfcpp-dev                                          # agent: command filter; valid UTF-8 from /proc
  chromium                                                          # headless render check of the HTML reports
  libcurl4-openssl-dev clickhouse-server clickhouse-client          # agent's ClickHouse sink; its tests start a real server
  libssl-dev                                                        # agent: the HTTP bearer token checked with libcrypto
)
missing=()
for p in "${PKGS[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# eBPF needs tracefs for tracepoints and a high memlock limit for maps (the tool raises its own rlimit too).
if [ ! -d /sys/kernel/tracing/events ]; then mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true; fi
echo "install-deps.sh: all dependencies present"
