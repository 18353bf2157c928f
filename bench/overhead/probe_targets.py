"""Prints LIBRARY:SYMBOL, one a line, for functions stackscope probes in this python's torch (CUDA runtime and
driver launches, NCCL all-reduce, two at::_ops entry points, the CPython C API), found through /proc/self/maps
after a CUDA op, as the tracer finds them. For `build/bench/uprobe_cost --first-insn`: whether a uprobe on each
traps once (emulated push) or twice (single-stepped endbr64 and the like).

  build/bench/uprobe_cost --first-insn-only $(python3 bench/overhead/probe_targets.py | sed 's/^/--first-insn /')"""
import os
import sys

WANT = {
    "libcudart.so": ["cudaLaunchKernel", "cudaMemcpyAsync", "cudaStreamSynchronize", "cudaGraphLaunch"],
    "libcuda.so": ["cuLaunchKernel", "cuLaunchKernel_ptsz", "cuMemcpyHtoDAsync_v2"],
    "libnccl.so": ["ncclAllReduce", "pncclAllReduce"],
    "libtorch_cpu.so": ["_ZN2at4_ops2mm4callERKNS_6TensorES4_", "_ZN2at4_ops4tanh4callERKNS_6TensorE"],
}


def main():
    import torch

    if torch.cuda.is_available():
        (torch.ones(4, device="cuda") + 1).sum().item()
    seen = set()
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1] if "/" in line else ""
            base = os.path.basename(path)
            for lib, syms in WANT.items():
                if base.startswith(lib) and path not in seen:
                    seen.add(path)
                    for s in syms:
                        print(f"{path}:{s}")
    exe = os.path.realpath(sys.executable)
    for s in ("PyObject_Call", "PyObject_Vectorcall"):
        print(f"{exe}:{s}")


if __name__ == "__main__":
    main()
