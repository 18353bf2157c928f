"""Names shared by the GPU validation scripts: which CUDA API calls are kernel launches, and the base name of a
versioned or per-thread-stream variant (cuMemAlloc_v2 -> cuMemAlloc, cuLaunchKernel_ptsz -> cuLaunchKernel)."""

LAUNCH_APIS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
               "cudaLaunchCooperativeKernel", "cudaGraphLaunch", "cuGraphLaunch")


def api_name(name):
    for suffix in ("_ptsz", "_ptds"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    if "_v" in name and name.rsplit("_v", 1)[1].isdigit():
        name = name.rsplit("_v", 1)[0]
    return name
