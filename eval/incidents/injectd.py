#!/usr/bin/env python3
"""Injector daemon of incident benchmark v2: turns fault classes on and off for a workload, from OUTSIDE the traced
job (run_v2.sh starts it before `stackscope record`, so the interfering processes are not the job's children, as a
real neighbour is not), and serves the job's loader its TCP data path.

  python3 eval/incidents/injectd.py --socket /tmp/x.sock [--classes LIST] [--gpu N] [--netfault BIN] \
      [--data-dir D] [--data-port 10000] [--loader-loss-percent 15] [--nccl-loss-percent 5]
prints "ready" once its helpers are up. A workload (eval/incidents/harness.py) sends one JSON line per request on
the Unix socket: {"cmd": "on"|"off", "class": C} or {"cmd": "quit"}; the answer is one JSON line with the culprits
(kind, name, pid) and what the injector measured.

The loader's data server listens on 127.0.0.1:DATA_PORT and its clients bind source ports DATA_PORT+1..+63, so the
network class (netfault on those ports) hits the loader's path only, and nccl_network (netfault on the kernel's
ephemeral port range, where NCCL's sockets live) hits NCCL only (scored as network: schedule.CLASS_OF_KIND says why).
"""
import argparse
import json
import os
import random
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
HOGS = os.path.join(HERE, "hogs.py")
DATA_PORTS = 64  # the data server's port and its clients' source ports


def ephemeral_ports():
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        lo, hi = f.read().split()
    return int(lo), int(hi)


def comm_of(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


class DataServer:
    """Answers each 4-byte big-endian length n with n bytes (pre-drawn random data): the batches a remote data
    service would send. One thread per connection; connections live as long as the loader's workers."""

    def __init__(self, port):
        self.blob = os.urandom(32 << 20)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(64)
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    def serve(self, conn):
        view = memoryview(self.blob)
        with conn:
            while True:
                head = b""
                while len(head) < 4:
                    try:
                        part = conn.recv(4 - len(head))
                    except OSError:  # the loader's workers close with RST (no TIME_WAIT)
                        return
                    if not part:
                        return
                    head += part
                n = min(struct.unpack("!I", head)[0], len(self.blob))
                off = random.randrange(0, len(self.blob) - n + 1)
                try:
                    conn.sendall(view[off:off + n])
                except OSError:
                    return


class Injectors:
    def __init__(self, args):
        self.args = args
        self.active = {}  # class -> what to undo
        self.h2d = None
        self.second = None
        classes = set(args.classes.split(",")) if args.classes else set()
        if args.gpu is not None and "pcie_pressure" in classes:
            self.h2d = subprocess.Popen([sys.executable, HOGS, "h2d", "--device", str(args.gpu)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            if self.h2d.stdout.readline().strip() != "ready":
                raise SystemExit("injectd: the copy-storm process did not start")
        if args.gpu is not None and "gpu_contention" in classes:
            # The Table I benchmark's second GPU process (idle until told), reused as it is.
            sys.path.insert(0, os.path.join(HERE, "..", "faults"))
            from fault_train import SecondProcess  # noqa: E402  (imports torch: only on GPU runs)
            self.second = SecondProcess(args.gpu, 1.0)
        if args.netfault:
            subprocess.run([args.netfault, "--cleanup"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def spawn(self, argv, n=1, **kw):
        return [subprocess.Popen([sys.executable, HOGS] + argv, **kw) for _ in range(n)]

    def netfault(self, ports, percent):
        if not self.args.netfault:
            raise RuntimeError("no --netfault binary: network classes cannot be injected")
        return subprocess.Popen([self.args.netfault, "--dev", "lo", "--drop-percent", str(percent),
                                 "--ports", ports, "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def on(self, cls):
        if cls in self.active:
            raise RuntimeError(f"{cls} is already on")
        a = self.args
        params, procs = {}, []
        if cls == "cpu_interference":
            n = a.cpu_procs or os.cpu_count()
            procs = self.spawn(["cpu"], n)
            params["procs"] = n
        elif cls == "memory_pressure":
            procs = self.spawn(["mem"] + (["--floor-mib", str(a.mem_floor_mib)] if a.mem_floor_mib else []) +
                               (["--max-mib", str(a.mem_max_mib)] if a.mem_max_mib else []),
                               stdout=subprocess.PIPE, text=True)
            # Answer once the memory is taken (the fill takes seconds on a large machine; the workload counts the
            # episode's length from this answer): wait for the hog's report, at most --mem-ramp-max s.
            r, _, _ = select.select([procs[0].stdout], [], [], a.mem_ramp_max)
            params["ramp_s"] = None
            if r:
                try:
                    params.update(json.loads(procs[0].stdout.readline()))
                    params["ramp_s"] = params.pop("reached_s", None)
                except ValueError:
                    pass
        elif cls == "storage_stall":
            procs = self.spawn(["fsync", "--dir", a.data_dir], a.fsync_procs)
            params.update(procs=a.fsync_procs, dir=a.data_dir)
        elif cls == "pcie_pressure":
            if not self.h2d:
                raise RuntimeError("pcie_pressure needs --gpu and the class in --classes at start")
            self.h2d.stdin.write("on\n")
            self.h2d.stdin.flush()
        elif cls == "gpu_contention":
            if not self.second:
                raise RuntimeError("gpu_contention needs --gpu and the class in --classes at start")
            self.second.send("gpu_contention")
        elif cls in ("network", "nccl_network"):
            if cls == "network":
                ports = f"{a.data_port}-{a.data_port + DATA_PORTS - 1}"
            else:
                ports = "%d-%d" % ephemeral_ports()
            loss = a.loader_loss_percent if cls == "network" else a.nccl_loss_percent
            procs = [self.netfault(ports, loss)]
            params.update(loss_percent=loss, ports=ports)
        else:
            raise RuntimeError(f"no injector for class {cls!r}")
        self.active[cls] = procs
        culprits = [{"kind": "process", "name": comm_of(p.pid), "pid": p.pid} for p in procs
                    if cls not in ("network", "nccl_network")]
        if cls == "pcie_pressure":
            culprits = [{"kind": "process", "name": comm_of(self.h2d.pid), "pid": self.h2d.pid}]
        if cls == "gpu_contention":
            culprits = [{"kind": "process", "name": comm_of(self.second.p.pid), "pid": self.second.p.pid}]
        if cls in ("network", "nccl_network"):
            culprits = [{"kind": "link", "name": "lo"}]
        for c in culprits:  # the name the hog gives itself (prctl) once its interpreter is up
            if c.get("pid") and cls in ("cpu_interference", "memory_pressure", "storage_stall"):
                deadline = time.monotonic() + 5
                while comm_of(c["pid"]).startswith("python") and time.monotonic() < deadline:
                    time.sleep(0.02)
            if c.get("pid"):
                c["name"] = comm_of(c["pid"])
        return {"ok": True, "culprits": culprits, "params": params}

    def off(self, cls):
        procs = self.active.pop(cls, None)
        if procs is None:
            return {"ok": True, "params": {}}
        params = {}
        if cls == "pcie_pressure":
            self.h2d.stdin.write("off\n")
            self.h2d.stdin.flush()
        elif cls == "gpu_contention":
            self.second.send("idle")
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                out, _ = p.communicate(timeout=20) if p.stdout else (None, p.wait(timeout=20))
            except subprocess.TimeoutExpired:
                p.kill()
                out = None
            if out:  # netfault's counters, the memory hog's fill report
                for line in str(out).splitlines():
                    try:
                        params.update(json.loads(line))
                    except ValueError:
                        pass
        return {"ok": True, "params": params}

    def close(self):
        for cls in list(self.active):
            self.off(cls)
        if self.h2d:
            try:
                self.h2d.stdin.write("quit\n")
                self.h2d.stdin.flush()
                self.h2d.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.h2d.kill()
        if self.second:
            self.second.close()
        if self.args.netfault:
            subprocess.run([self.args.netfault, "--cleanup"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--socket", required=True)
    ap.add_argument("--classes", default="", help="classes that need a helper started first (pcie_pressure, "
                                                   "gpu_contention)")
    ap.add_argument("--gpu", type=int, default=None, help="the GPU the job uses (GPU-side injectors)")
    ap.add_argument("--netfault", default="", help="the packet-loss injector (eval/netfault)")
    ap.add_argument("--data-dir", default="/var/tmp/stackscope-v2")
    ap.add_argument("--data-port", type=int, default=10000)
    # Loopback recovers a lost segment within milliseconds (tail-loss probes, fast retransmit at microsecond RTTs),
    # so the loader's request-sized transfers need heavy loss to stall; NCCL's long streams suffer at a few %.
    ap.add_argument("--loader-loss-percent", type=float, default=15.0, help="network: loss on the loader's path")
    ap.add_argument("--nccl-loss-percent", type=float, default=5.0, help="nccl_network: loss on NCCL's ports")
    ap.add_argument("--cpu-procs", type=int, default=0, help="cpu_interference spinners (default: one per CPU)")
    ap.add_argument("--fsync-procs", type=int, default=2)
    ap.add_argument("--mem-floor-mib", type=int, default=0, help="memory_pressure: MemAvailable to leave (default "
                                                                 "1 %% of RAM, at least 1 GiB)")
    ap.add_argument("--mem-max-mib", type=int, default=0, help="memory_pressure: take at most this (tests)")
    ap.add_argument("--mem-ramp-max", type=float, default=45, help="memory_pressure: longest wait for the fill")
    args = ap.parse_args()
    os.makedirs(args.data_dir, exist_ok=True)
    DataServer(args.data_port)
    inj = Injectors(args)
    try:
        os.unlink(args.socket)
    except FileNotFoundError:
        pass
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(args.socket)
    srv.listen(8)
    stop = []

    def on_signal(_sig, _frame):
        stop.append(1)
        srv.close()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    print("ready", flush=True)
    while not stop:
        try:
            conn, _ = srv.accept()
        except OSError:
            break
        with conn:
            f = conn.makefile("rw")
            try:
                req = json.loads(f.readline())
                if req.get("cmd") == "quit":
                    f.write(json.dumps({"ok": True}) + "\n")
                    f.flush()
                    break
                reply = inj.on(req["class"]) if req.get("cmd") == "on" else inj.off(req["class"])
            except Exception as e:  # noqa: BLE001  (any failure goes back to the workload as an answer)
                reply = {"ok": False, "error": str(e)}
            f.write(json.dumps(reply) + "\n")
            f.flush()
    inj.close()
    try:
        os.unlink(args.socket)
    except OSError:
        pass


if __name__ == "__main__":
    main()
