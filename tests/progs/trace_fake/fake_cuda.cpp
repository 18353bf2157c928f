// Fake libcuda.so.1: driver entry points that do nothing observable but keep a counter (not optimised away).
#include <time.h>

#include "fake_gpu_api.h"

namespace {
volatile unsigned long long g_calls = 0;
}

extern "C" {
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                        void**, void**) {
  g_calls = g_calls + 1;
  return CUDA_SUCCESS;
}
CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule, const char*) {
  *hfunc = reinterpret_cast<CUfunction>(0xf00dULL + g_calls);
  g_calls = g_calls + 1;
  return CUDA_SUCCESS;
}
CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  *dptr = 0x7f0000000000ULL + bytesize + g_calls;
  g_calls = g_calls + 1;
  return CUDA_SUCCESS;
}
CUresult cuStreamSynchronize(CUstream) {
  timespec ts{0, 2'000'000};  // the wait a real synchronisation would be
  nanosleep(&ts, nullptr);
  g_calls = g_calls + 1;
  return CUDA_SUCCESS;
}
}
