#!/usr/bin/env bash
# Packs Debian's Prometheus and ClickHouse server (with every shared library it needs but glibc's own) into one
# tarball for a machine that has neither and cannot install them (the GPU hosts reach no registry):
# bench/agent/fleet_e2e.sh unpacks it (FLEET_TAR). About 35 MB xz-compressed (48 MB + 137 MB unpacked).
#   bench/agent/pack_fleet_servers.sh .carry/fleet.tar.xz
set -euo pipefail
out=${1:?usage: pack_fleet_servers.sh OUT.tar.xz}
prom=${PROMETHEUS:-/usr/bin/prometheus}; ch=${CLICKHOUSE:-/usr/sbin/clickhouse-server}
for b in "$prom" "$ch"; do [ -x "$b" ] || { echo "pack_fleet_servers.sh: $b missing (scripts/install-deps.sh installs it)"; exit 2; }; done
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkdir -p "$d/clickhouse"
cp "$prom" "$d/prometheus"
cp "$ch" "$d/clickhouse/clickhouse-server"
# glibc comes from the host (the carried stackscope binaries need it as well); everything else travels.
ldd "$ch" | awk '$3 ~ /^\// {print $3}' | grep -v -E '/(libc|libm|libpthread|libdl|librt|libresolv)\.so|ld-linux' |
  while read -r lib; do cp -L "$lib" "$d/clickhouse/"; done
mkdir -p "$(dirname "$out")"
tar -C "$d" -cf - . | xz -T0 -9e >"$out"
ls -la "$out"
