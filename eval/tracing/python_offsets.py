#!/usr/bin/env python3
"""Measures, inside the running interpreter, the CPython struct offsets that stackscope's Python stack sampler
(--python-mode stack, bpf/pystack.bpf.c) reads, and compares them with the table stackscope carries.

Nothing is taken from headers here: every offset is found by searching the interpreter's own memory for a value
known from Python (id() of an object is its address; threading.get_native_id() is the thread's tid), read through
/proc/self/mem so that a wrong guess is an OSError, never a crash.

  python3.X eval/tracing/python_offsets.py [[--stackscope] path/to/stackscope]

Exit status 0 when every offset of this version in stackscope's table matches; 1 on a mismatch or when this
version has no table; 2 when a measurement failed.
"""
import ctypes
import json
import os
import struct
import subprocess
import sys
import threading

MEM = os.open("/proc/self/mem", os.O_RDONLY)


def read(addr, n):
    if addr is None or addr <= 0 or addr >= 1 << 63:
        return None
    try:
        return os.pread(MEM, n, addr)
    except OSError:
        return None


def u64(addr):
    b = read(addr, 8)
    return struct.unpack("<Q", b)[0] if b and len(b) == 8 else None


def find_word(base, span, value, step=8):
    """First offset in [0, span) where the 8-byte word equals value."""
    b = read(base, span)
    if not b:
        return None
    for off in range(0, len(b) - 7, step):
        if struct.unpack_from("<Q", b, off)[0] == value:
            return off
    return None


def fail(what):
    print(f"measurement failed: {what}", file=sys.stderr)
    sys.exit(2)


api = ctypes.pythonapi
api.PyThreadState_Get.restype = ctypes.c_void_p
api.PyInterpreterState_Get.restype = ctypes.c_void_p

measured = {}
runtime = ctypes.addressof(ctypes.c_char.in_dll(api, "_PyRuntime"))
interp = api.PyInterpreterState_Get()
main_tstate = api.PyThreadState_Get()

# _PyRuntime.interpreters.head (head precedes main in struct pyinterpreters: the first match is head).
measured["runtime_interpreters_head"] = find_word(runtime, 4096, interp)
# PyThreadState.native_thread_id
measured["tstate_native_thread_id"] = find_word(main_tstate, 2048, threading.get_native_id())

# A second thread: new threads are pushed at interp->threads.head, and their `next` is the previous head.
seen = {}
ready, release = threading.Event(), threading.Event()


def second():
    seen["tstate"] = api.PyThreadState_Get()
    ready.set()
    release.wait()


t = threading.Thread(target=second)
t.start()
ready.wait()
measured["interp_threads_head"] = find_word(interp, 4096, seen["tstate"])
measured["tstate_next"] = find_word(seen["tstate"], 512, main_tstate)
release.set()
t.join()

# Code objects: fields found by their values. A method (qualname "ProbeClass.probe_target" differs from its
# name) whose first line is unusual (12345) finds co_firstlineno among the object's ints.
ns = {}
exec(compile("class ProbeClass:\n" + "\n" * 12343 + "    def probe_target(self):\n        return 1\n",
             "probe_file_xyz.py", "exec"), ns)
code = ns["ProbeClass"].probe_target.__code__
assert code.co_firstlineno == 12345 and code.co_qualname != code.co_name
measured["code_filename"] = find_word(id(code), 512, id(code.co_filename))
measured["code_name"] = find_word(id(code), 512, id(code.co_name))
measured["code_qualname"] = find_word(id(code), 512, id(code.co_qualname))
cb = read(id(code), 512)
measured["code_firstlineno"] = next((o for o in range(0, 508, 4) if struct.unpack_from("<i", cb, o)[0] == 12345), None)

# Unicode: where an ASCII-compact string's characters start, and the state bit field (compact bit 5, ascii 6).
s = "stackscope_probe_string"
sb = read(id(s), 256)
measured["unicode_ascii_data"] = sb.find(s.encode()) if sb else None
measured["unicode_length"] = find_word(id(s), 64, len(s))
measured["unicode_state"] = 32
state = struct.unpack_from("<I", sb, 32)[0]
non_ascii = "stackscope_\u00e9t\u00e9"
state_na = struct.unpack_from("<I", read(id(non_ascii), 64), 32)[0]
unicode_bits_ok = (state >> 5) & 1 == 1 and (state >> 6) & 1 == 1 and (state_na >> 6) & 1 == 0


# Frames: tstate->cframe->current_frame is the running function's _PyInterpreterFrame, whose f_code is that
# function's code and whose `previous` is its caller's frame. The pointers to the current frame are read with
# os.pread and struct (C functions, no Python frame of their own) so that the frame seen is the caller's.
def frame_layout(caller_code):
    leaf_code = frame_layout.__code__
    tstate_bytes = os.pread(MEM, 512, api.PyThreadState_Get())
    candidates = []  # (cframe offset, current_frame offset, frame address)
    for cframe_off in range(0, 512, 8):
        cframe = struct.unpack_from("<Q", tstate_bytes, cframe_off)[0]
        if cframe < 4096 or cframe >= 1 << 47:
            continue
        try:
            cb = os.pread(MEM, 24, cframe)
        except OSError:
            continue
        for cur_off in (0, 8, 16):
            candidates.append((cframe_off, cur_off, struct.unpack_from("<Q", cb, cur_off)[0]))
    for cframe_off, cur_off, frame in candidates:
        code_off = find_word(frame, 80, id(leaf_code))
        if code_off is None:
            continue
        for prev_off in range(0, 80, 8):
            prev = u64(frame + prev_off)
            if prev and prev > 4096 and u64(prev + code_off) == id(caller_code):
                return cframe_off, cur_off, code_off, prev_off
    return None


def leaf():
    return frame_layout(leaf.__code__)


layout = leaf()
if not layout:
    fail("no tstate -> cframe -> current_frame -> f_code path to the running function")
measured["tstate_cframe"], measured["cframe_current_frame"], measured["frame_code"], measured["frame_previous"] = layout
CF, CUR = measured["tstate_cframe"], measured["cframe_current_frame"]


def current_frame_bytes():
    cframe = struct.unpack("<Q", os.pread(MEM, 8, api.PyThreadState_Get() + CF))[0]
    return os.pread(MEM, 80, struct.unpack("<Q", os.pread(MEM, 8, cframe + CUR))[0])


def gen():
    cframe = struct.unpack("<Q", os.pread(MEM, 8, api.PyThreadState_Get() + CF))[0]
    yield os.pread(MEM, 80, struct.unpack("<Q", os.pread(MEM, 8, cframe + CUR))[0])


gen_frame = next(gen())
plain = current_frame_bytes()
# `owner` (FRAME_OWNED_BY_THREAD 0, _GENERATOR 1): the byte that is 0 in a plain frame and 1 in a generator's,
# past the pointer fields.
owners = [o for o in range(56, 80) if plain[o] == 0 and gen_frame[o] == 1]
measured["frame_owner"] = owners[-1] if owners else None


# 3.12: a Python function called back from C (sorted's key) runs in a new eval loop whose entry frame is a shim
# owned by the C stack (FRAME_OWNED_BY_CSTACK 3); 3.11 has no shim frame. The owners from the current frame up.
def owner_chain():
    cframe = struct.unpack("<Q", os.pread(MEM, 8, api.PyThreadState_Get() + CF))[0]
    f = struct.unpack("<Q", os.pread(MEM, 8, cframe + CUR))[0]
    chain = []
    for _ in range(8):
        if not f or measured["frame_owner"] is None:
            break
        chain.append(read(f, 80)[measured["frame_owner"]])
        f = u64(f + measured["frame_previous"])
    return chain


owners_seen = []
sorted([0], key=lambda _: owners_seen.extend(owner_chain()) or 0)
measured["owner_cstack_seen"] = 3 in owners_seen

version = f"{sys.version_info.major}.{sys.version_info.minor}"
print(f"python {sys.version.split()[0]} ({sys.executable})")
print(json.dumps({"version": version, "measured": measured, "unicode_state_bits_ok": unicode_bits_ok,
                  "frame_owners_under_sorted_key": owners_seen}, indent=1))

if any(v is None for v in measured.values()):
    fail("some offsets not found: " + ", ".join(k for k, v in measured.items() if v is None))
if not unicode_bits_ok:
    fail("unicode state bits: compact/ascii not at bits 5/6")

args = [a for a in sys.argv[1:] if a != "--stackscope"]
if not args:
    sys.exit(0)
out = subprocess.run([args[0], "record", "--python-offsets"], capture_output=True, text=True)
if out.returncode != 0:
    print(out.stdout + out.stderr, file=sys.stderr)
    fail("stackscope record --python-offsets failed")
table = json.loads(out.stdout).get(version)
if table is None:
    print(f"stackscope has no offsets for python {version}")
    sys.exit(1)
bad = 0
for key, want in table.items():
    if key == "owner_cstack":
        got = 3 if measured["owner_cstack_seen"] else 255
    elif key in measured:
        got = measured[key]
    else:
        continue
    ok = got == want
    bad += not ok
    print(f"{key:28s} stackscope {want:5d}  measured {got:5d}  {'ok' if ok else 'MISMATCH'}")
print("all offsets match" if bad == 0 else f"{bad} offset(s) differ")
sys.exit(1 if bad else 0)
