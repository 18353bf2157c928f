#include "trace/probe_catalog.h"

#include "events.h"

namespace stackscope::trace {

namespace {

using F = ArgFormat;
constexpr uint8_t S0 = SS_ARG_STACK, S1 = SS_ARG_STACK + 1, S2 = SS_ARG_STACK + 2, D0 = SS_ARG_DEREF;
const std::vector<LibraryKind> kRuntime{LibraryKind::cudart};
const std::vector<LibraryKind> kDriver{LibraryKind::cuda_driver};
const std::vector<LibraryKind> kNccl{LibraryKind::nccl};

uint64_t entry_deref(unsigned arg1) { return static_cast<uint64_t>(arg1) << 20; }
uint64_t ret_deref(unsigned arg1) { return static_cast<uint64_t>(arg1) << 24; }
uint64_t str_arg(unsigned arg1) { return static_cast<uint64_t>(arg1) << 28; }

// Runtime call: driver calls beneath it are folded in; per-thread-stream variants probed too.
CallSpec rt(std::string name, std::vector<ArgField> fields, uint64_t flags = 0, bool async = false) {
  CallSpec s;
  s.symbols = {name, name + "_ptsz", name + "_ptds"};
  s.name = std::move(name);
  s.libs = kRuntime;
  s.fields = std::move(fields);
  s.cookie_flags = flags | SS_COOKIE_RUNTIME;
  s.host_enqueue = async;
  s.entry_only = async && SS_COOKIE_RET_DEREF(flags) == 0 && s.name.find("Free") == std::string::npos;
  return s;
}

// Driver call; `versions` are the ABI suffixes the driver exports it under (cuMemAlloc_v2).
CallSpec drv(std::string name, std::vector<std::string> versions, std::vector<ArgField> fields, uint64_t flags = 0,
             bool async = false) {
  CallSpec s;
  for (auto& v : versions)
    for (const char* suffix : {"", "_ptsz", "_ptds"}) s.symbols.push_back(name + v + suffix);
  s.name = std::move(name);
  s.libs = kDriver;
  s.fields = std::move(fields);
  s.cookie_flags = flags | SS_COOKIE_DRIVER;
  s.host_enqueue = async;
  s.entry_only = async && SS_COOKIE_RET_DEREF(flags) == 0 && s.name.find("Free") == std::string::npos;
  return s;
}

CallSpec nccl(std::string name, std::vector<ArgField> fields, bool async = true) {
  CallSpec s;
  s.symbols = {name, "p" + name};  // public names are weak aliases of pnccl*: both resolve to one address
  s.name = std::move(name);
  s.layer = Layer::nccl;
  s.libs = kNccl;
  s.fields = std::move(fields);
  s.host_enqueue = async;
  return s;
}

const std::vector<ArgField> kLaunchRuntimeFields{
    {"grid_x", 1, F::u32},  {"grid_y", 1, F::hi32},     {"grid_z", 2, F::u32}, {"block_x", 3, F::u32},
    {"block_y", 3, F::hi32}, {"block_z", 4, F::u32},    {"shared_mem", S0, F::u64}, {"stream", S1, F::u64}};
// cudaLaunchConfig_t and CUlaunchConfig share a layout: 3+3 x u32 dims, shared memory, stream at offset 32.
const std::vector<ArgField> kLaunchConfigFields{
    {"grid_x", D0, F::u32},      {"grid_y", D0, F::hi32},     {"grid_z", D0 + 1, F::u32},
    {"block_x", D0 + 1, F::hi32}, {"block_y", D0 + 2, F::u32}, {"block_z", D0 + 2, F::hi32},
    {"shared_mem", D0 + 3, F::u32}, {"stream", D0 + 4, F::u64}};

}  // namespace

std::vector<CallSpec> builtin_call_specs() {
  std::vector<CallSpec> v;
  // ---- CUDA runtime: launches
  for (const char* n : {"cudaLaunchKernel", "cudaLaunchCooperativeKernel"}) {
    auto s = rt(n, kLaunchRuntimeFields, SS_COOKIE_STACK, true);
    s.role = CallRole::launch_host_fn;
    s.kernel_arg = 0;
    v.push_back(s);
  }
  {
    auto s = rt("cudaLaunchKernelExC", kLaunchConfigFields, entry_deref(1), true);
    s.role = CallRole::launch_host_fn;
    s.kernel_arg = 1;
    v.push_back(s);
  }
  v.push_back(rt("cudaGraphLaunch", {{"graph_exec", 0, F::u64}, {"stream", 1, F::u64}}, 0, true));
  // ---- CUDA runtime: memory
  v.push_back(rt("cudaMalloc", {{"ptr", D0, F::u64}, {"bytes", 1, F::u64}}, ret_deref(1)));
  v.push_back(rt("cudaMallocAsync", {{"ptr", D0, F::u64}, {"bytes", 1, F::u64}, {"stream", 2, F::u64}},
                 ret_deref(1), true));
  v.push_back(rt("cudaMallocHost", {{"ptr", D0, F::u64}, {"bytes", 1, F::u64}}, ret_deref(1)));
  v.push_back(rt("cudaHostAlloc", {{"ptr", D0, F::u64}, {"bytes", 1, F::u64}, {"flags", 2, F::u32}}, ret_deref(1)));
  v.push_back(rt("cudaMallocManaged", {{"ptr", D0, F::u64}, {"bytes", 1, F::u64}, {"flags", 2, F::u32}},
                 ret_deref(1)));
  v.push_back(rt("cudaFree", {{"ptr", 0, F::u64}}));
  v.push_back(rt("cudaFreeAsync", {{"ptr", 0, F::u64}, {"stream", 1, F::u64}}, 0, true));
  v.push_back(rt("cudaFreeHost", {{"ptr", 0, F::u64}}));
  // ---- CUDA runtime: copies and memsets
  v.push_back(rt("cudaMemcpy", {{"dst", 0, F::u64}, {"src", 1, F::u64}, {"bytes", 2, F::u64},
                                {"direction", 3, F::memcpy_kind}}));
  v.push_back(rt("cudaMemcpyAsync", {{"dst", 0, F::u64}, {"src", 1, F::u64}, {"bytes", 2, F::u64},
                                     {"direction", 3, F::memcpy_kind}, {"stream", 4, F::u64}}, 0, true));
  v.push_back(rt("cudaMemset", {{"ptr", 0, F::u64}, {"value", 1, F::i32}, {"bytes", 2, F::u64}}));
  v.push_back(rt("cudaMemsetAsync", {{"ptr", 0, F::u64}, {"value", 1, F::i32}, {"bytes", 2, F::u64},
                                     {"stream", 3, F::u64}}, 0, true));
  // ---- CUDA runtime: synchronisation (blocking: the duration is the wait)
  v.push_back(rt("cudaStreamSynchronize", {{"stream", 0, F::u64}}));
  v.push_back(rt("cudaDeviceSynchronize", {}));
  v.push_back(rt("cudaEventSynchronize", {{"event", 0, F::u64}}));
  v.push_back(rt("cudaStreamWaitEvent", {{"stream", 0, F::u64}, {"event", 1, F::u64}}, 0, true));

  // ---- CUDA driver: launches
  {
    auto s = drv("cuLaunchKernel", {""},
                 {{"grid_x", 1, F::u32}, {"grid_y", 2, F::u32}, {"grid_z", 3, F::u32}, {"block_x", 4, F::u32},
                  {"block_y", 5, F::u32}, {"block_z", S0, F::u32}, {"shared_mem", S1, F::u32},
                  {"stream", S2, F::u64}},
                 SS_COOKIE_STACK, true);
    s.role = CallRole::launch_cufunction;
    s.kernel_arg = 0;
    v.push_back(s);
  }
  {
    auto s = drv("cuLaunchKernelEx", {""}, kLaunchConfigFields, entry_deref(1), true);
    s.role = CallRole::launch_cufunction;
    s.kernel_arg = 1;
    v.push_back(s);
  }
  v.push_back(drv("cuGraphLaunch", {""}, {{"graph_exec", 0, F::u64}, {"stream", 1, F::u64}}, 0, true));
  {
    auto s = drv("cuModuleGetFunction", {""}, {{"function", D0, F::u64}, {"module", 1, F::u64}},
                 ret_deref(1) | str_arg(3));
    s.role = CallRole::module_get_function;
    v.push_back(s);
  }
  // ---- CUDA driver: memory
  v.push_back(drv("cuMemAlloc", {"_v2", ""}, {{"ptr", D0, F::u64}, {"bytes", 1, F::u64}}, ret_deref(1)));
  v.push_back(drv("cuMemAllocAsync", {""}, {{"ptr", D0, F::u64}, {"bytes", 1, F::u64}, {"stream", 2, F::u64}},
                  ret_deref(1), true));
  v.push_back(drv("cuMemAllocHost", {"_v2", ""}, {{"ptr", D0, F::u64}, {"bytes", 1, F::u64}}, ret_deref(1)));
  v.push_back(drv("cuMemHostAlloc", {""}, {{"ptr", D0, F::u64}, {"bytes", 1, F::u64}, {"flags", 2, F::u32}},
                  ret_deref(1)));
  v.push_back(drv("cuMemAllocManaged", {""}, {{"ptr", D0, F::u64}, {"bytes", 1, F::u64}, {"flags", 2, F::u32}},
                  ret_deref(1)));
  v.push_back(drv("cuMemFree", {"_v2", ""}, {{"ptr", 0, F::u64}}));
  v.push_back(drv("cuMemFreeAsync", {""}, {{"ptr", 0, F::u64}, {"stream", 1, F::u64}}, 0, true));
  v.push_back(drv("cuMemFreeHost", {""}, {{"ptr", 0, F::u64}}));
  // ---- CUDA driver: copies and memsets
  const std::vector<ArgField> copy{{"dst", 0, F::u64}, {"src", 1, F::u64}, {"bytes", 2, F::u64}};
  const std::vector<ArgField> copy_async{{"dst", 0, F::u64}, {"src", 1, F::u64}, {"bytes", 2, F::u64},
                                         {"stream", 3, F::u64}};
  for (auto [n, dir] : {std::pair{"cuMemcpyHtoD", "HtoD"}, {"cuMemcpyDtoH", "DtoH"}, {"cuMemcpyDtoD", "DtoD"}}) {
    auto s = drv(n, {"_v2", ""}, copy);
    s.direction = dir;
    v.push_back(s);
    auto a = drv(std::string(n) + "Async", {"_v2", ""}, copy_async, 0, true);
    a.direction = dir;
    v.push_back(a);
  }
  v.push_back(drv("cuMemcpy", {""}, copy));
  v.push_back(drv("cuMemcpyAsync", {""}, copy_async, 0, true));
  for (auto [n, size] : {std::pair{"cuMemsetD8", 1}, {"cuMemsetD16", 2}, {"cuMemsetD32", 4}}) {
    auto s = drv(n, {"_v2", ""}, {{"ptr", 0, F::u64}, {"value", 1, F::u32}, {"count", 2, F::u64}});
    s.elem_size = static_cast<uint8_t>(size);
    v.push_back(s);
    auto a = drv(std::string(n) + "Async", {""},
                 {{"ptr", 0, F::u64}, {"value", 1, F::u32}, {"count", 2, F::u64}, {"stream", 3, F::u64}}, 0, true);
    a.elem_size = static_cast<uint8_t>(size);
    v.push_back(a);
  }
  // ---- CUDA driver: synchronisation
  v.push_back(drv("cuStreamSynchronize", {""}, {{"stream", 0, F::u64}}));
  v.push_back(drv("cuCtxSynchronize", {""}, {}));
  v.push_back(drv("cuEventSynchronize", {""}, {{"event", 0, F::u64}}));
  v.push_back(drv("cuStreamWaitEvent", {""}, {{"stream", 0, F::u64}, {"event", 1, F::u64}}, 0, true));

  // ---- NCCL: communicators. ncclUniqueId (128 bytes) goes by value on the stack, so `rank` is in rdx.
  for (const char* n : {"ncclCommInitRank", "ncclCommInitRankConfig"}) {
    auto s = nccl(n, {{"comm", D0, F::u64}, {"nranks", 1, F::i32}, {"rank", 2, F::i32}}, false);
    s.cookie_flags = ret_deref(1);
    s.role = CallRole::nccl_init;
    v.push_back(s);
  }
  {  // ncclCommInitRankScalable(comm*, nranks, myrank, nId, commIds*, config)
    auto s = nccl("ncclCommInitRankScalable", {{"comm", D0, F::u64}, {"nranks", 1, F::i32}, {"rank", 2, F::i32}},
                  false);
    s.cookie_flags = ret_deref(1);
    s.role = CallRole::nccl_init;
    v.push_back(s);
  }
  {
    auto s = nccl("ncclCommInitAll", {{"ndev", 1, F::i32}}, false);
    s.cookie_flags = ret_deref(1);
    s.role = CallRole::nccl_init_all;
    v.push_back(s);
  }
  {
    auto s = nccl("ncclCommSplit", {{"comm", 0, F::u64}, {"color", 1, F::i32}, {"key", 2, F::i32},
                                    {"new_comm", D0, F::u64}}, false);
    s.cookie_flags = ret_deref(4);
    v.push_back(s);
  }
  {
    auto s = nccl("ncclCommUserRank", {{"comm", 0, F::u64}, {"rank", D0, F::i32}}, false);
    s.cookie_flags = ret_deref(2);
    s.role = CallRole::nccl_user_rank;
    v.push_back(s);
  }
  for (const char* n : {"ncclCommDestroy", "ncclCommAbort"}) {
    auto s = nccl(n, {{"comm", 0, F::u64}}, false);
    s.role = CallRole::nccl_destroy;
    v.push_back(s);
  }
  // ---- NCCL: collectives and point-to-point (asynchronous: enqueue on `stream`)
  v.push_back(nccl("ncclAllReduce", {{"count", 2, F::u64}, {"datatype", 3, F::nccl_dtype}, {"op", 4, F::nccl_redop},
                                     {"comm", 5, F::u64}, {"stream", S0, F::u64}}));
  v.push_back(nccl("ncclAllGather", {{"count", 2, F::u64}, {"datatype", 3, F::nccl_dtype}, {"comm", 4, F::u64},
                                     {"stream", 5, F::u64}}));
  v.push_back(nccl("ncclReduceScatter", {{"count", 2, F::u64}, {"datatype", 3, F::nccl_dtype},
                                         {"op", 4, F::nccl_redop}, {"comm", 5, F::u64}, {"stream", S0, F::u64}}));
  v.push_back(nccl("ncclBroadcast", {{"count", 2, F::u64}, {"datatype", 3, F::nccl_dtype}, {"root", 4, F::i32},
                                     {"comm", 5, F::u64}, {"stream", S0, F::u64}}));
  v.push_back(nccl("ncclBcast", {{"count", 1, F::u64}, {"datatype", 2, F::nccl_dtype}, {"root", 3, F::i32},
                                 {"comm", 4, F::u64}, {"stream", 5, F::u64}}));
  v.push_back(nccl("ncclReduce", {{"count", 2, F::u64}, {"datatype", 3, F::nccl_dtype}, {"op", 4, F::nccl_redop},
                                  {"root", 5, F::i32}, {"comm", S0, F::u64}, {"stream", S1, F::u64}}));
  for (const char* n : {"ncclSend", "ncclRecv"})
    v.push_back(nccl(n, {{"count", 1, F::u64}, {"datatype", 2, F::nccl_dtype}, {"peer", 3, F::i32},
                         {"comm", 4, F::u64}, {"stream", 5, F::u64}}));
  v.push_back(nccl("ncclGroupStart", {}, false));
  v.push_back(nccl("ncclGroupEnd", {}, true));  // launches the grouped operations
  return v;
}

CallSpec python_capi_spec(const std::string& symbol) {
  CallSpec s;
  s.name = symbol;
  s.symbols = {symbol};
  s.layer = Layer::python;
  s.libs = {LibraryKind::python};
  s.has_ret = false;
  return s;
}

uint64_t call_cookie(const CallSpec& spec, uint32_t id, bool full_detail) {
  uint64_t c = (id & 0xffff) | spec.cookie_flags;
  if (spec.entry_only && !full_detail) c |= SS_COOKIE_ENTRY_ONLY;
  for (auto& f : spec.fields)
    if (f.index >= SS_ARG_STACK && f.index < SS_ARG_DEREF) c |= SS_COOKIE_STACK;
  return c;
}

const char* nccl_datatype_name(int64_t dt) {
  static const char* names[] = {"int8",    "uint8",   "int32",    "uint32",      "int64",      "uint64",
                                "float16", "float32", "float64",  "bfloat16",    "float8e4m3", "float8e5m2"};
  return dt >= 0 && dt < static_cast<int64_t>(std::size(names)) ? names[dt] : "unknown";
}

int nccl_datatype_size(int64_t dt) {
  static const int sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return dt >= 0 && dt < static_cast<int64_t>(std::size(sizes)) ? sizes[dt] : 0;
}

const char* nccl_redop_name(int64_t op) {
  static const char* names[] = {"sum", "prod", "max", "min", "avg"};
  if (op >= 0 && op < static_cast<int64_t>(std::size(names))) return names[op];
  return "custom";  // ncclRedOpCreatePreMulSum and friends
}

const char* memcpy_kind_name(int64_t kind) {
  static const char* names[] = {"HtoH", "HtoD", "DtoH", "DtoD", "default"};
  return kind >= 0 && kind < static_cast<int64_t>(std::size(names)) ? names[kind] : "unknown";
}

}  // namespace stackscope::trace
