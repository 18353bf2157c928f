// Fake libnccl.so.2: like NCCL, the public API is a set of weak aliases of pnccl* (one address, two names).
#include "fake_gpu_api.h"

namespace {
volatile unsigned long long g_calls = 0;
}

extern "C" {
ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  *comm = reinterpret_cast<ncclComm_t>(0xc0aa0000ULL + static_cast<unsigned>(rank) * 0x100 + nranks +
                                       static_cast<unsigned char>(commId.internal[0]));
  g_calls = g_calls + 1;
  return ncclSuccess;
}
ncclResult_t pncclAllReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) {
  g_calls = g_calls + 1;
  return ncclSuccess;
}
ncclResult_t pncclAllGather(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) {
  g_calls = g_calls + 1;
  return ncclSuccess;
}
ncclResult_t pncclReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, cudaStream_t) {
  g_calls = g_calls + 1;
  return ncclSuccess;
}
ncclResult_t pncclSend(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) {
  g_calls = g_calls + 1;
  return ncclSuccess;
}
ncclResult_t pncclGroupStart() {
  g_calls = g_calls + 1;
  return ncclSuccess;
}
ncclResult_t pncclGroupEnd() {
  g_calls = g_calls + 1;
  return ncclSuccess;
}
ncclResult_t ncclCommInitRank(ncclComm_t*, int, ncclUniqueId, int) __attribute__((weak, alias("pncclCommInitRank")));
ncclResult_t ncclAllReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t)
    __attribute__((weak, alias("pncclAllReduce")));
ncclResult_t ncclAllGather(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t)
    __attribute__((weak, alias("pncclAllGather")));
ncclResult_t ncclReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, cudaStream_t)
    __attribute__((weak, alias("pncclReduce")));
ncclResult_t ncclSend(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t)
    __attribute__((weak, alias("pncclSend")));
ncclResult_t ncclGroupStart() __attribute__((weak, alias("pncclGroupStart")));
ncclResult_t ncclGroupEnd() __attribute__((weak, alias("pncclGroupEnd")));
}
