// The probed C entry points of the CUDA runtime/driver and NCCL (and Python C-API fallbacks): which symbols,
// how the BPF side captures their arguments (the uprobe cookie) and how user space names those arguments.
// Signatures follow the real headers (cuda_runtime_api.h, cuda.h, nccl.h) for x86-64 SysV: args[0..5] are
// the integer registers, args[6..11] the stack words after the return address, args[12..19] a dereferenced
// pointer (see bpf/events.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/layer.h"
#include "trace/proc_maps.h"

namespace stackscope::trace {

enum class ArgFormat : uint8_t {
  u64,          // whole word (pointers, sizes, streams)
  u32,          // low 32 bits
  hi32,         // high 32 bits (second member of a by-value dim3 packed in one register)
  i32,          // low 32 bits, signed
  nccl_dtype,   // ncclDataType_t -> name
  nccl_redop,   // ncclRedOp_t -> name
  memcpy_kind,  // cudaMemcpyKind -> "HtoD"...
};

struct ArgField {
  const char* key;
  uint8_t index;  // into ss_call_record.args
  ArgFormat format;
};

enum class CallRole : uint8_t {
  plain,
  launch_host_fn,     // kernel named by a host stub address (cudaLaunchKernel): kernel_arg
  launch_cufunction,  // kernel named by a CUfunction handle (cuLaunchKernel): kernel_arg
  module_get_function,  // cuModuleGetFunction: remembers CUfunction -> name
  nccl_init,          // ncclCommInitRank*: comm (out) -> rank, nranks
  nccl_init_all,      // ncclCommInitAll: comms[i] -> rank i
  nccl_user_rank,     // ncclCommUserRank: comm -> rank (out)
  nccl_destroy,       // ncclCommDestroy/Abort: forget comm
};

struct CallSpec {
  std::string name;                  // event name
  std::vector<std::string> symbols;  // every one found is probed (variants: _v2, _ptsz, _ptds, pnccl*)
  Layer layer = Layer::cuda;
  std::vector<LibraryKind> libs;     // where to look for the symbols
  std::vector<ArgField> fields;
  CallRole role = CallRole::plain;
  uint8_t kernel_arg = 0;
  uint64_t cookie_flags = 0;         // SS_COOKIE_* capture flags (stack, deref, runtime/driver)
  bool host_enqueue = false;         // asynchronous: duration is the CPU enqueue cost only
  // Probed without a return probe unless --detail full: an asynchronous call with no out-parameter, whose
  // duration is only the enqueue time (launches, async copies and memsets, stream waits). One trap, not two.
  bool entry_only = false;
  bool has_ret = true;               // returns an error code worth recording
  const char* direction = nullptr;   // copies whose direction is in the name (cuMemcpyHtoD)
  uint8_t elem_size = 0;             // memsets by element count (cuMemsetD32: 4)
};

// The built-in CUDA and NCCL catalog. Ids (the uprobe cookie's low bits) are indexes into the returned vector.
std::vector<CallSpec> builtin_call_specs();
// Python C-API fallbacks (timed only, no arguments), appended after the built-ins.
CallSpec python_capi_spec(const std::string& symbol);
// The cookie for spec `id`: id plus the capture flags its fields need; `full_detail` keeps the return probe of
// entry-only calls (their duration and return value).
uint64_t call_cookie(const CallSpec& spec, uint32_t id, bool full_detail = true);

const char* nccl_datatype_name(int64_t dt);
int nccl_datatype_size(int64_t dt);  // 0 when unknown
const char* nccl_redop_name(int64_t op);
const char* memcpy_kind_name(int64_t kind);

}  // namespace stackscope::trace
