"""What the three workloads of incident benchmark v2 share: options, the data loader, the fault schedule and its log,
and the training (or inference) loop. A workload module defines only its model and how one step runs.

The loader is a torch DataLoader over an iterable dataset whose workers, for each batch, read a block of a local
dataset file with O_DIRECT (so the job's reads reach the disk, and a storage stall reaches the job), fetch a blob
from the injector daemon's data server over loopback TCP (the path the network class hits), and sleep while the
host_stall class is on (a shared value every worker reads).

The fault log (--fault-log) is JSON lines, CLOCK_MONOTONIC nanoseconds (time.monotonic_ns()), written by rank 0:
  {"kind": "meta", "workload": .., "seed": .., "start_ns": .., "plan": [...], ...}      first
  {"fault": "cpu_hog", "class": "cpu_interference", "start_ns": .., "end_ns": .., "params": {...}}   per episode
  {"kind": "end", "end_ns": .., "steps": .., "step_ms_median": ..}                      last
An episode's params carry the job's median step time in the normal stretch before it and during it (its slowdown),
so that a missed episode that did not slow the job can be told from one that did. stackscope never reads this log.
"""
import argparse
import json
import mmap
import os
import socket
import statistics
import struct
import sys
import threading
import time

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from schedule import FAULT_OF_CLASS, class_of, make_schedule  # noqa: E402

DATA_PORTS = 64


def add_args(ap):
    ap.add_argument("--seconds", type=float, default=140, help="length of the measured loop (after warm-up)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--faults", default="none", help="fault classes of the run's episodes, in order; none: clean")
    ap.add_argument("--fault-log", required=True)
    ap.add_argument("--injector", default="", help="the injector daemon's socket (eval/incidents/injectd.py)")
    ap.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    ap.add_argument("--lead", type=float, default=20, help="normal seconds before the first episode")
    ap.add_argument("--min-gap", type=float, default=8, help="shortest normal gap between episodes")
    ap.add_argument("--min-len", type=float, default=10)
    ap.add_argument("--max-len", type=float, default=30)
    ap.add_argument("--data-dir", default="/var/tmp/stackscope-v2")
    ap.add_argument("--data-mib", type=int, default=0, help="dataset file size (default 1024 on GPU, 128 on CPU)")
    ap.add_argument("--data-port", type=int, default=0, help="the data server's port (0: no TCP fetch)")
    ap.add_argument("--tcp-kib", type=int, default=0, help="KiB fetched over TCP per batch (default 512 GPU, 32 CPU)")
    ap.add_argument("--stall-ms", type=float, default=0, help="host_stall: loader sleep per batch (default 4 x the "
                                                             "measured step time per worker, 40-400 ms)")
    ap.add_argument("--workers", type=int, default=-1, help="DataLoader workers (default 3 GPU, 1 CPU)")
    ap.add_argument("--warmup-steps", type=int, default=10)


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Context:
    """Device, ranks and sizes of one run."""

    def __init__(self, args):
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.local = int(os.environ.get("LOCAL_RANK", "0"))
        want = args.device
        if want == "auto":
            want = "cuda" if torch.cuda.is_available() else "cpu"
        self.gpu = want == "cuda"
        if self.gpu:
            torch.cuda.set_device(self.local)
            self.device = torch.device("cuda", self.local)
        else:
            self.device = torch.device("cpu")
        self.distributed = self.world > 1
        if self.distributed:
            if self.gpu:
                dist.init_process_group("nccl", device_id=self.device)
            else:
                dist.init_process_group("gloo")
        if args.data_mib == 0:
            args.data_mib = 1024 if self.gpu else 128
        if args.tcp_kib == 0:
            args.tcp_kib = 512 if self.gpu else 32
        if args.workers < 0:
            args.workers = 3 if self.gpu else 1

    def wrap(self, model):
        if not self.distributed:
            return model
        return torch.nn.parallel.DistributedDataParallel(model, device_ids=[self.local] if self.gpu else None)


def dataset_file(args):
    """The local dataset file (random bytes), made once per data dir and size."""
    os.makedirs(args.data_dir, exist_ok=True)
    path = os.path.join(args.data_dir, f"dataset_{args.data_mib}m.bin")
    if os.path.exists(path) and os.path.getsize(path) == args.data_mib << 20:
        return path
    tmp = f"{path}.{os.getpid()}.tmp"
    block, left = os.urandom(16 << 20), args.data_mib << 20
    with open(tmp, "wb") as f:
        while left > 0:
            f.write(block[:left])
            left -= len(block)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


class BatchSource(torch.utils.data.IterableDataset):
    """Endless batches: (file bytes, TCP bytes) as uint8 tensors, read as the loader of a real job would fetch its
    samples: from local storage, bypassing the page cache, and from a remote service."""

    def __init__(self, path, file_bytes, tcp_bytes, data_port, stall, rank, seed):
        self.path, self.file_bytes, self.tcp_bytes = path, file_bytes, tcp_bytes
        self.data_port, self.stall, self.rank, self.seed = data_port, stall, rank, seed

    def _open(self):
        size = os.path.getsize(self.path)
        self.blocks = max(1, (size - self.file_bytes) // 4096)
        self.nbytes = -(-self.file_bytes // 4096) * 4096
        self.buf = mmap.mmap(-1, self.nbytes)  # page-aligned, as O_DIRECT wants
        try:
            self.fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_DIRECT", 0))
            os.preadv(self.fd, [self.buf], 0)
            self.direct = True
        except OSError:  # a file system without O_DIRECT (tmpfs): read, then drop the pages from the cache
            self.fd = os.open(self.path, os.O_RDONLY)
            self.direct = False

    def _connect(self, worker):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # A fixed source port next to the server's, so that netfault's port range for the network class covers
        # both directions of this path and nothing else; closing with RST leaves no TIME_WAIT to block a rerun.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        port = self.data_port + 1 + (self.rank * 16 + worker + self.seed) % (DATA_PORTS - 1)
        s.bind(("127.0.0.1", port))
        s.connect(("127.0.0.1", self.data_port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def _fetch(self, s, into):
        s.sendall(struct.pack("!I", len(into)))
        view, got = memoryview(into), 0
        while got < len(into):
            n = s.recv_into(view[got:])
            if n == 0:
                raise ConnectionError("data server closed the connection")
            got += n

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        worker = info.id if info else 0
        self._open()
        rng = torch.Generator().manual_seed(self.seed * 1000 + self.rank * 16 + worker)
        sock = self._connect(worker) if self.data_port else None
        tcp_buf = bytearray(self.tcp_bytes)
        while True:
            if self.stall.value > 0:
                time.sleep(self.stall.value)
            off = int(torch.randint(0, self.blocks, (1,), generator=rng)) * 4096
            os.preadv(self.fd, [self.buf], off)
            if not self.direct:
                os.posix_fadvise(self.fd, off, self.nbytes, os.POSIX_FADV_DONTNEED)
            data = torch.frombuffer(self.buf, dtype=torch.uint8)[: self.file_bytes].clone()
            if sock is not None:
                self._fetch(sock, tcp_buf)
                extra = torch.frombuffer(tcp_buf, dtype=torch.uint8).clone()
            else:
                extra = torch.randint(0, 256, (self.tcp_bytes,), dtype=torch.uint8, generator=rng)
            yield data, extra


def make_loader(args, ctx, file_bytes):
    import multiprocessing as mp
    stall = mp.Value("d", 0.0, lock=False)  # shared with the workers (forked after this)
    src = BatchSource(dataset_file(args), file_bytes, args.tcp_kib << 10, args.data_port, stall, ctx.rank, args.seed)
    kw = dict(batch_size=None, num_workers=args.workers, pin_memory=ctx.gpu)
    if args.workers > 0:
        kw.update(persistent_workers=True, prefetch_factor=2)
    return torch.utils.data.DataLoader(src, **kw), stall


class InjectorClient:
    def __init__(self, path):
        self.path = path

    def call(self, cmd, cls):
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(120)
        s.connect(self.path)
        with s:
            f = s.makefile("rw")
            f.write(json.dumps({"cmd": cmd, "class": cls}) + "\n")
            f.flush()
            reply = json.loads(f.readline())
        if not reply.get("ok"):
            raise SystemExit(f"injector: {cmd} {cls}: {reply.get('error')}")
        return reply


def median_ms(durations):
    return round(statistics.median(durations) * 1e3, 3) if durations else None


def run(workload_name, args, ctx, loader, stall, step):
    """The measured loop: `step(batch)` runs one step and returns a scalar tensor (its .item() is the sync)."""
    faults = [] if args.faults in ("", "none") else args.faults.split(",")
    for c in faults:
        if c not in FAULT_OF_CLASS:
            raise SystemExit(f"unknown fault class {c!r}; known: {', '.join(FAULT_OF_CLASS)}")
    needs_daemon = [c for c in faults if c != "host_stall"]
    if needs_daemon and not args.injector:
        raise SystemExit(f"classes {', '.join(needs_daemon)} need the injector daemon (--injector SOCKET)")
    client = InjectorClient(args.injector) if args.injector else None
    it = iter(loader)

    times = []  # (end time s, step duration s)
    last = time.monotonic()
    for _ in range(args.warmup_steps):
        step(next(it)).item()
    warm = []
    for _ in range(5):
        t = time.monotonic()
        step(next(it)).item()
        warm.append(time.monotonic() - t)
    # Four steps' worth per batch and worker (the workers fetch in parallel), within 40-400 ms: the warm steps can
    # be slow while the recorder attaches its probes.
    stall_s = (args.stall_ms / 1e3) if args.stall_ms else min(0.4, max(0.04, 4 * statistics.median(warm) *
                                                                           max(1, args.workers)))

    t0 = torch.tensor([time.monotonic_ns()], dtype=torch.int64, device=ctx.device)
    if ctx.distributed:
        dist.broadcast(t0, 0)
    t0_ns = int(t0.item())
    plan = make_schedule(args.seed, args.seconds, faults, lead_s=args.lead, min_len=args.min_len,
                         max_len=args.max_len, min_gap=args.min_gap)
    end_ns = t0_ns + int(args.seconds * 1e9)
    out = None
    if ctx.rank == 0:
        os.makedirs(os.path.dirname(os.path.abspath(args.fault_log)), exist_ok=True)
        out = open(args.fault_log, "w")
        out.write(json.dumps({"kind": "meta", "workload": workload_name, "seed": args.seed, "start_ns": t0_ns,
                              "planned_end_ns": end_ns, "device": str(ctx.device), "ranks": ctx.world,
                              "host": socket.gethostname(), "warm_step_ms": median_ms(warm),
                              "stall_ms": round(stall_s * 1e3, 1),
                              "plan": [{"class": class_of(c), "kind": c, "start_s": a, "end_s": b}
                                       for c, a, b in plan]}) + "\n")
        out.flush()
    log(f"{workload_name}: rank {ctx.rank}: {len(plan)} episodes over {args.seconds:.0f} s; warm step "
        f"{median_ms(warm)} ms")

    episode = None  # the one in progress: its class, phase (starting, on, stopping), the injector's call
    nxt, steps = 0, 0
    normal_since = 0.0  # monotonic s from which the job's steps are normal again (2 s after the last episode)
    stop = torch.zeros(1, device=ctx.device)
    last = time.monotonic()
    while True:
        now = time.monotonic_ns()
        if not ctx.distributed or steps % 5 == 0:  # every rank stops at the same step (a collective decides)
            stop.fill_(1.0 if now >= end_ns else 0.0)
            if ctx.distributed:
                dist.all_reduce(stop)
            if stop.item() > 0:
                break
        rel = (now - t0_ns) / 1e9
        if episode is None and nxt < len(plan) and rel >= plan[nxt][1]:
            cls, p0, p1 = plan[nxt]
            nxt += 1
            episode = {"class": cls, "length": p1 - p0, "on": Call(fault_on, cls, ctx, client, stall, stall_s)}
            log(f"rank {ctx.rank}: t={rel:.1f}s {cls} on")
        elif episode and "end_rel" not in episode and episode["on"].done():
            # The episode starts when the injector was called (a memory hog's fill is part of it) and lasts its
            # planned length from when the injector answered (the fill done, the hog holding its memory).
            episode["started_ns"] = episode["on"].started_ns
            episode["end_rel"] = (episode["on"].finished_ns - t0_ns) / 1e9 + episode["length"]
        elif episode and "end_rel" in episode and "off" not in episode and rel >= episode["end_rel"]:
            episode["off"] = Call(fault_off, episode["class"], ctx, client, stall)
            log(f"rank {ctx.rank}: t={rel:.1f}s {episode['class']} off")
        elif episode and "off" in episode and episode["off"].done():
            if out:
                write_episode(out, episode, times, normal_since)
            normal_since = episode["off"].finished_ns / 1e9 + 2
            episode = None
        step(next(it)).item()
        t = time.monotonic()
        times.append((t, t - last))
        last = t
        steps += 1
    if episode is not None:  # the run ended inside an episode: close it as it stands
        episode["on"].wait()
        episode.setdefault("started_ns", episode["on"].started_ns)
        if "off" not in episode:
            episode["off"] = Call(fault_off, episode["class"], ctx, client, stall)
        episode["off"].wait()
        if out:
            write_episode(out, episode, times, normal_since)
    if out:
        out.write(json.dumps({"kind": "end", "end_ns": time.monotonic_ns(), "steps": steps,
                              "step_ms_median": median_ms([d for _, d in times])}) + "\n")
        out.close()
    log(f"{workload_name}: rank {ctx.rank}: {steps} steps, {nxt} episodes, done")
    if ctx.distributed:
        dist.barrier()
        dist.destroy_process_group()


def fault_on(cls, ctx, client, stall, stall_s):
    if cls == "host_stall":
        stall.value = stall_s
        return {"culprits": [], "params": {"sleep_ms": round(stall_s * 1e3, 1)}}
    if ctx.rank == 0:
        return client.call("on", cls)
    return {}


def fault_off(cls, ctx, client, stall):
    if cls == "host_stall":
        stall.value = 0.0
        return {}
    if ctx.rank == 0:
        return client.call("off", cls)
    return {}


class Call:
    """A call to the injector in a thread, so that the job keeps stepping while a hog ramps up or winds down (a
    blocked training loop would itself look like a stall); started_ns and finished_ns bound the call."""

    def __init__(self, fn, *args):
        self.result, self.error, self.finished_ns = None, None, None
        self.started_ns = time.monotonic_ns()
        self.thread = threading.Thread(target=self._run, args=(fn, args), daemon=True)
        self.thread.start()

    def _run(self, fn, args):
        try:
            self.result = fn(*args)
        except BaseException as e:  # noqa: BLE001  (re-raised in the loop's thread by wait/done)
            self.error = e
        self.finished_ns = time.monotonic_ns()

    def done(self):
        if self.thread.is_alive():
            return False
        if self.error is not None:
            raise self.error
        return True

    def wait(self):
        self.thread.join()
        return self.done()


def write_episode(out, episode, times, normal_since):
    """One episode line, with the job's step time before it (up to 15 s of normal work: after the previous
    episode's end and 2 s of recovery) and during it."""
    cls, start_ns, end_ns = episode["class"], episode["started_ns"], episode["off"].finished_ns
    on_reply, off_reply = episode["on"].result or {}, episode["off"].result or {}
    s0, s1 = start_ns / 1e9, end_ns / 1e9
    before = [d for t, d in times if max(s0 - 15, normal_since) <= t < s0]
    during = [d for t, d in times if s0 <= t < s1]
    b, d = median_ms(before), median_ms(during)
    mean_b = sum(before) / len(before) if before else None
    mean_d = sum(during) / len(during) if during else None
    params = dict(on_reply.get("params", {}))
    params.update(off_reply.get("params", {}))
    # slowdown: mean step time during / before, i.e. throughput lost (rare long stalls count, as they cost time);
    # the medians show whether every step slowed or a few stalled.
    params.update(step_ms_before=b, step_ms_during=d, steps_during=len(during),
                  slowdown=round(mean_d / mean_b, 3) if mean_b and mean_d else None)
    out.write(json.dumps({"fault": FAULT_OF_CLASS[cls], "class": class_of(cls), "start_ns": start_ns, "end_ns": end_ns,
                          "culprits": on_reply.get("culprits", []), "params": params}) + "\n")
    out.flush()


def parser(doc):
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_args(ap)
    return ap
