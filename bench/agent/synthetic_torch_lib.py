#!/usr/bin/env python3
"""A stripped shared library named libtorch_cpu.so with pip-torch-sized symbol tables, for measuring what the tracer's
symbol reading costs on a machine without pip torch (Debian's libtorch_cpu has 35k symbols; pip's hundreds of
thousands). N exported `ret` functions with mangled names of about 100-230 characters, 8 of them
`at::_ops::<op>::call` (probed by the torch family). Needs `as`, `ld`, `strip`.
  python3 bench/agent/synthetic_torch_lib.py DIR [N]     -> DIR/libtorch_cpu.so
  python3 bench/agent/synthetic_torch_lib.py --map DIR/libtorch_cpu.so --seconds S   (maps it, idles S seconds)
e.g. OUT=/tmp/rss SECONDS_RUN=20 bash bench/agent/record_rss.sh /usr/bin/python3 \\
       bench/agent/synthetic_torch_lib.py --map /tmp/big/libtorch_cpu.so"""
import ctypes
import os
import random
import subprocess
import sys
import time

if len(sys.argv) > 2 and sys.argv[1] == "--map":
    lib = ctypes.CDLL(sys.argv[2])
    end = time.time() + float(sys.argv[sys.argv.index("--seconds") + 1]) if "--seconds" in sys.argv else 1e18
    while time.time() < end:
        time.sleep(0.05)
    sys.exit(0)
if len(sys.argv) < 2:
    sys.exit(__doc__)
out, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 300000
os.makedirs(out, exist_ok=True)
random.seed(1)
asm = os.path.join(out, "big.s")
tail = ("ERKNS_6TensorES4_S4_RKN3c106ScalarES8_N3c108optionalINS_10ScalarTypeEEENS9_INS_6LayoutEEENS9_INS_6Device"
        "EEENS9_IbEE")
with open(asm, "w") as f:
    f.write(".text\n")

    def fn(name):
        f.write(f".globl {name}\n.type {name},@function\n{name}:\n ret\n.size {name},.-{name}\n")

    for op in ["addmm", "mm", "relu", "gelu", "layer_norm", "add_Tensor", "mul_Tensor", "embedding"]:
        fn(f"_ZN2at4_ops{len(op)}{op}4callERKNS_6TensorES4_S4_RKN3c106ScalarES8_")
    for i in range(n):
        ns = "native" if i % 2 else "detail"
        a = "".join(random.choice("abcdefghijklmnopqrstuvwxyz_") for _ in range(random.randint(20, 60)))
        fn(f"_ZN2at{len(ns)}{ns}{len(a)}{a}{i}E{tail[:random.randint(60, 150)]}")
obj, lib = os.path.join(out, "big.o"), os.path.join(out, "libtorch_cpu.so")
subprocess.run(["as", "-o", obj, asm], check=True)
subprocess.run(["ld", "-shared", "-o", lib, obj], check=True)
subprocess.run(["strip", "--strip-all", lib], check=True)
os.remove(asm)
os.remove(obj)
print(lib)
