#!/usr/bin/env python3
"""Load generators for the Reveal reproductions (eval/reveal/repro.sh, gpu_repro.sh); standard library only.

  tcp PORT SECONDS [MBPS]   loopback TCP stream at a steady rate (the baseline traffic that packet loss hits)
  timers SECONDS [THREADS]  interrupt pressure without a device: threads arming short sleeps (hrtimer/local timer
                            interrupts, scheduler IPIs) at tens of thousands of wakeups per second, little CPU
  memory SECONDS [MIB]      allocate and touch MIB of anonymous memory, hold it
  dirty SECONDS [MIB] DIR   dirty pages then writeback: MIB of buffered writes spread evenly over SECONDS (little
                            CPU at a time), then fsync (the writeback burst); the file is removed at the end
"""
import os
import socket
import sys
import threading
import time


def tcp(port, seconds, mbps=40.0):
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(1)

    def drain():
        c, _ = srv.accept()
        while c.recv(1 << 20):
            pass

    t = threading.Thread(target=drain, daemon=True)
    t.start()
    s = socket.create_connection(("127.0.0.1", port))
    chunk = b"x" * (64 << 10)
    per_tick = max(1, int(mbps * 1e6 / len(chunk) / 100))  # 100 ticks a second
    end = time.time() + seconds
    next_tick = time.time()
    while time.time() < end:
        for _ in range(per_tick):
            s.sendall(chunk)
        next_tick += 0.01
        time.sleep(max(0.0, next_tick - time.time()))
    s.close()


def timers(seconds, threads=32):
    end = time.time() + seconds

    def spin():
        while time.time() < end:
            time.sleep(0.00002)

    ts = [threading.Thread(target=spin) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def memory(seconds, mib=1024):
    b = bytearray(mib << 20)
    for i in range(0, len(b), 4096):
        b[i] = 1
    time.sleep(seconds)


def dirty(seconds, mib, directory):
    path = os.path.join(directory, "reveal-dirty.bin")
    block = os.urandom(1 << 20)
    start = time.time()
    with open(path, "wb") as f:
        for k in range(mib):
            f.write(block)
            time.sleep(max(0.0, start + (k + 1) * seconds * 0.8 / mib - time.time()))
        f.flush()
        os.fsync(f.fileno())
    time.sleep(max(0.0, start + seconds - time.time()))
    os.unlink(path)


if __name__ == "__main__":
    kind, args = sys.argv[1], sys.argv[2:]
    if kind == "tcp":
        tcp(int(args[0]), float(args[1]), float(args[2]) if len(args) > 2 else 40.0)
    elif kind == "timers":
        timers(float(args[0]), int(args[1]) if len(args) > 1 else 32)
    elif kind == "memory":
        memory(float(args[0]), int(args[1]) if len(args) > 1 else 1024)
    elif kind == "dirty":
        dirty(float(args[0]), int(args[1]) if len(args) > 1 else 1024, args[2] if len(args) > 2 else "/tmp")
    else:
        sys.exit(__doc__)
