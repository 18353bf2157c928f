#!/usr/bin/env python3
"""What the driver answers for the NVML fields the sampler reads (PCIe byte counters 197/198, PCIe replays 94,
NVLink data 138/139), per GPU: each field's return code, value type and value, read twice 1 s apart (a counter
must grow), and how long one nvmlDeviceGetFieldValues call takes. On the 4-GPU H200 host (driver 580)
the sampler fell back from the byte counters to the 20 ms nvmlDeviceGetPcieThroughput, and nothing said why.

  python3 eval/nvml/pcie_fields.py [LIBRARY]      (default libnvidia-ml.so.1; no GPU needed with the fake library)
"""
import ctypes
import sys
import time

LIB = sys.argv[1] if len(sys.argv) > 1 else "libnvidia-ml.so.1"
FIELDS = {197: "PCIe TX bytes", 198: "PCIe RX bytes", 94: "PCIe replays", 138: "NVLink TX KiB", 139: "NVLink RX KiB"}
TYPES = {0: "double", 1: "unsigned int (32-bit)", 2: "unsigned long", 3: "unsigned long long (64-bit)",
         4: "signed long long", 5: "signed int", 6: "unsigned short"}


class Value(ctypes.Union):
    _fields_ = [("d", ctypes.c_double), ("si", ctypes.c_int), ("ui", ctypes.c_uint), ("ul", ctypes.c_ulong),
                ("ull", ctypes.c_ulonglong), ("sll", ctypes.c_longlong), ("us", ctypes.c_ushort)]


class FieldValue(ctypes.Structure):  # nvmlFieldValue_t
    _fields_ = [("fieldId", ctypes.c_uint), ("scopeId", ctypes.c_uint), ("timestamp", ctypes.c_longlong),
                ("latencyUsec", ctypes.c_longlong), ("valueType", ctypes.c_int), ("nvmlReturn", ctypes.c_int),
                ("value", Value)]


def number(f):
    return {0: f.value.d, 1: f.value.ui, 2: f.value.ul, 3: f.value.ull, 4: f.value.sll, 5: f.value.si,
            6: f.value.us}.get(f.valueType)


nvml = ctypes.CDLL(LIB)
nvml.nvmlErrorString.restype = ctypes.c_char_p
err = lambda r: nvml.nvmlErrorString(r).decode()
r = nvml.nvmlInit_v2()
if r:
    sys.exit(f"nvmlInit: {err(r)} ({r})")
count = ctypes.c_uint()
nvml.nvmlDeviceGetCount_v2(ctypes.byref(count))
for i in range(count.value):
    dev = ctypes.c_void_p()
    nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(dev))
    reads = []
    for _ in range(2):
        # Room for one entry more than asked, filled with a pattern: a driver writing past the end shows.
        vals = (FieldValue * (len(FIELDS) + 1))()
        for k, fid in enumerate(FIELDS):
            vals[k].fieldId = fid
            vals[k].scopeId = 0xFFFFFFFF if fid in (138, 139) else 0
        vals[len(FIELDS)].fieldId = 0xA5A5A5A5
        t0 = time.perf_counter()
        r = nvml.nvmlDeviceGetFieldValues(dev, len(FIELDS), vals)
        ms = (time.perf_counter() - t0) * 1e3
        reads.append((time.monotonic(), r, ms, [vals[k] for k in range(len(FIELDS))], vals[len(FIELDS)].fieldId))
        time.sleep(1)
    (t1, r1, ms1, a, guard1), (t2, r2, ms2, b, guard2) = reads
    print(f"gpu{i}: nvmlDeviceGetFieldValues -> {r1}/{r2}, {ms1:.2f} / {ms2:.2f} ms"
          + ("" if guard1 == guard2 == 0xA5A5A5A5 else " (wrote past the entries it was given)"))
    for fa, fb in zip(a, b):
        name = FIELDS[fa.fieldId]
        if fa.nvmlReturn:
            print(f"  {fa.fieldId} {name}: {err(fa.nvmlReturn)} ({fa.nvmlReturn})")
            continue
        va, vb = number(fa), number(fb)
        rate = "" if va is None or vb is None else f", {(vb - va) / (t2 - t1):.3g}/s between the reads"
        print(f"  {fa.fieldId} {name}: value type {fa.valueType} ({TYPES.get(fa.valueType, '?')}), {va} then {vb}{rate}")
nvml.nvmlShutdown()
