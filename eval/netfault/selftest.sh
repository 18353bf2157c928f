#!/usr/bin/env bash
# netfault self-test (root): a 3 s loopback TCP transfer on a port in the range, once without and once with 5%
# ingress loss; passes when the loss run drops segments, the kernel's TcpRetransSegs rises by at least a quarter
# of the drops, the run without loss retransmits far less, and no clsact qdisc is left on lo.
# usage: eval/netfault/selftest.sh [NETFAULT=build/eval/netfault/netfault]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
nf=${NETFAULT:-$root/build/eval/netfault/netfault}
py=$(command -v /usr/bin/python3 || command -v python3)
port=${PORT:-29577}
retrans() { awk '/^Tcp:/{if (h) print $13; else h=1}' /proc/net/snmp; }  # RetransSegs column
transfer() {  # 3 s bulk send over loopback to a local receiver
  "$py" - "$port" <<'PY'
import socket, sys, threading, time
port = int(sys.argv[1])
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); srv.bind(("127.0.0.1", port)); srv.listen(1)
def drain():
    c, _ = srv.accept()
    while c.recv(1 << 20): pass
t = threading.Thread(target=drain); t.start()
s = socket.create_connection(("127.0.0.1", port)); buf = b"x" * (1 << 16); end = time.time() + 3
while time.time() < end: s.sendall(buf)
s.close(); t.join()
PY
}
r0=$(retrans); transfer; clean=$(( $(retrans) - r0 ))
"$nf" --dev lo --drop-percent 5 --ports "$((port - 10))-$((port + 10))" --duration 5 --json > /tmp/netfault-selftest.json &
nfpid=$!; sleep 0.5
r0=$(retrans); transfer; lossy=$(( $(retrans) - r0 ))
wait "$nfpid"
dropped=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["dropped"])' /tmp/netfault-selftest.json)
echo "netfault selftest: retransmissions without loss $clean, with 5% loss $lossy; netfault dropped $dropped"
cat /tmp/netfault-selftest.json
[ "$dropped" -gt 50 ] || { echo "FAIL: too few drops"; exit 1; }
[ "$lossy" -ge $((dropped / 4)) ] || { echo "FAIL: retransmissions did not follow the drops"; exit 1; }
[ "$lossy" -gt $((clean * 3)) ] || { echo "FAIL: no clear rise over the loss-free run"; exit 1; }
if [ -r /sys/class/net/lo ] && command -v tc >/dev/null && tc qdisc show dev lo | grep -q clsact; then
  echo "FAIL: clsact qdisc left on lo"; exit 1
fi
echo "PASS"
