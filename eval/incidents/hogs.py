#!/usr/bin/env python3
"""The interfering processes of incident benchmark v2, one kind per subcommand. Each renames itself (prctl
PR_SET_NAME) to a name no real job has, so that a report naming the culprit can be checked, and each stops on
SIGTERM (undoing what it did: memory freed, files removed). eval/incidents/injectd.py starts them; they are not
children of the traced job.

  hogs.py cpu                       spin on one CPU                                    (ss_cpuhog)
  hogs.py mem [--floor-mib F]       take memory until MemAvailable is down to F, then  (ss_memhog)
                                    hold it there, so that the kernel reclaims the job's pages
  hogs.py fsync --dir D             write and fdatasync 8 MiB blocks into one file in D (ss_fsynchog)
  hogs.py h2d [--device N]          idle until "on" on stdin, then copy pinned host     (ss_h2dstorm)
                                    memory to the GPU and back until "off"; "quit" ends
"""
import argparse
import ctypes
import json
import mmap
import os
import select
import signal
import sys
import threading
import time

NAMES = {"cpu": "ss_cpuhog", "mem": "ss_memhog", "fsync": "ss_fsynchog", "h2d": "ss_h2dstorm"}
MIB = 1 << 20


def set_name(name):
    """The process's comm (what /proc/PID/comm, top and NVML's process lists show): PR_SET_NAME = 15."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(15, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def meminfo():
    """{field: bytes} from /proc/meminfo."""
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, rest = line.split(":", 1)
            parts = rest.split()
            out[key] = int(parts[0]) * (1024 if len(parts) > 1 else 1)
    return out


def default_floor_bytes(info=None):
    """What the memory hog leaves available: 1 % of RAM, at least 1 GiB. Low enough that the kernel must reclaim
    the job's file pages (its libraries' code), high enough that the job's own allocations still find memory; the
    OOM killer, if it comes, takes the hog first (oom_score_adj 1000)."""
    info = info or meminfo()
    return max(1 << 30, info["MemTotal"] // 100)


def stop_on_sigterm(cleanup=None):
    def handler(_sig, _frame):
        if cleanup:
            cleanup()
        os._exit(0)
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def run_cpu(_args):
    stop_on_sigterm()
    x = 0
    while True:  # pure user-space spinning, one CPU's worth
        x += 1


def run_mem(args):
    """Take memory in chunks (mmap with MAP_POPULATE: the kernel faults the pages in, fast, outside the GIL) from
    several threads until MemAvailable reaches the floor; then keep it there: take a chunk when reclaim freed room,
    give one back when MemAvailable falls below half the floor. --max-mib bounds the total (tests)."""
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass
    floor = args.floor_mib * MIB if args.floor_mib else default_floor_bytes()
    chunk = args.chunk_mib * MIB
    limit = args.max_mib * MIB if args.max_mib else None
    chunks, lock = [], threading.Lock()
    populate = getattr(mmap, "MAP_POPULATE", 0)
    flags = mmap.MAP_PRIVATE | getattr(mmap, "MAP_ANONYMOUS", 0x20) | populate
    t0 = time.monotonic()
    state = {"reached_s": None}
    stop_on_sigterm()  # exiting frees every chunk at once

    reserved = [0]  # chunks taken or being taken: the limit holds however the threads interleave

    def reserve():
        with lock:
            if limit is not None and (reserved[0] + 1) * chunk > limit:
                return False
            # Several threads take at once: leave each a chunk of headroom so that together they stop at the floor.
            if meminfo()["MemAvailable"] <= floor + args.threads * chunk:
                return False
            reserved[0] += 1
            return True

    def take():
        m = mmap.mmap(-1, chunk, flags=flags)
        if not populate:  # touch one byte a page
            for off in range(0, chunk, mmap.PAGESIZE):
                m[off] = 1
        with lock:
            chunks.append(m)

    def filler():
        while reserve():
            take()

    threads = [threading.Thread(target=filler, daemon=True) for _ in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    while True:
        avail = meminfo()["MemAvailable"]
        if state["reached_s"] is None:
            state["reached_s"] = round(time.monotonic() - t0, 2)
            print(json.dumps({"held_mib": len(chunks) * chunk // MIB, "reached_s": state["reached_s"],
                              "available_mib": avail // MIB, "floor_mib": floor // MIB}), flush=True)
        if avail < floor // 2 and chunks:
            with lock:
                chunks.pop().close()
                reserved[0] -= 1
        elif avail > floor + chunk and (limit is None or (reserved[0] + 1) * chunk <= limit):
            reserved[0] += 1
            take()
        time.sleep(0.05)


def run_fsync(args):
    path = os.path.join(args.dir, f"ss_fsynchog.{os.getpid()}.dat")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)

    def cleanup():
        try:
            os.unlink(path)
        except OSError:
            pass
    stop_on_sigterm(cleanup)
    block = os.urandom(args.block_mib * MIB)
    size = args.file_mib * MIB
    off = 0
    while True:  # rewrite the same bounded file: disk traffic without filling the disk
        os.pwrite(fd, block, off)
        os.fdatasync(fd)
        off = (off + len(block)) % size


def run_h2d(args):
    import torch  # only this kind needs torch (and a GPU)

    dev = torch.device("cuda", args.device)
    n = args.buffer_mib * MIB
    host = torch.empty(n, dtype=torch.uint8).pin_memory()
    back = torch.empty(n, dtype=torch.uint8).pin_memory()
    gpu = torch.empty(n, dtype=torch.uint8, device=dev)
    torch.cuda.synchronize(dev)
    print("ready", flush=True)
    on = False
    while True:
        r, _, _ = select.select([sys.stdin], [], [], 0 if on else 0.2)
        if r:
            word = sys.stdin.readline().strip()
            if word in ("", "quit"):
                return
            on = word == "on"
        if on:
            for _ in range(4):  # both directions, as a copy-heavy neighbour (checkpointing, offload) would
                gpu.copy_(host, non_blocking=True)
                back.copy_(gpu, non_blocking=True)
            torch.cuda.synchronize(dev)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="kind", required=True)
    sub.add_parser("cpu")
    m = sub.add_parser("mem")
    m.add_argument("--floor-mib", type=int, default=0, help="MemAvailable to leave (default 1 %% of RAM, >= 1 GiB)")
    m.add_argument("--chunk-mib", type=int, default=256)
    m.add_argument("--threads", type=int, default=8)
    m.add_argument("--max-mib", type=int, default=0, help="hold at most this much (0: no bound but the floor)")
    f = sub.add_parser("fsync")
    f.add_argument("--dir", required=True)
    f.add_argument("--block-mib", type=int, default=8)
    f.add_argument("--file-mib", type=int, default=1024)
    h = sub.add_parser("h2d")
    h.add_argument("--device", type=int, default=0)
    h.add_argument("--buffer-mib", type=int, default=512)
    args = ap.parse_args(argv)
    set_name(NAMES[args.kind])
    {"cpu": run_cpu, "mem": run_mem, "fsync": run_fsync, "h2d": run_h2d}[args.kind](args)


if __name__ == "__main__":
    main()
