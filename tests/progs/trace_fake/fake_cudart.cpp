// Fake libcudart.so.13: runtime calls that call the driver beneath them, as the real runtime does, so the
// tracer's runtime/driver folding is exercised. Exported under the version node libcudart.so.13.
#include <cstring>

#include "fake_gpu_api.h"

namespace {
volatile unsigned long long g_calls = 0;
}

extern "C" {
cudaError_t cudaLaunchKernel(const void* func, dim3 g, dim3 b, void** args, size_t shared, cudaStream_t stream) {
  CUresult r = cuLaunchKernel(reinterpret_cast<CUfunction>(const_cast<void*>(func)), g.x, g.y, g.z, b.x, b.y, b.z,
                              static_cast<unsigned>(shared), stream, args, nullptr);
  g_calls = g_calls + 1;
  return r == CUDA_SUCCESS ? cudaSuccess : static_cast<cudaError_t>(1);
}
cudaError_t cudaMalloc(void** devPtr, size_t size) {
  CUdeviceptr p = 0;
  CUresult r = cuMemAlloc_v2(&p, size);
  *devPtr = reinterpret_cast<void*>(p);
  g_calls = g_calls + 1;
  return static_cast<cudaError_t>(r);
}
cudaError_t cudaFree(void*) {
  g_calls = g_calls + 1;
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  if (kind == cudaMemcpyHostToHost) std::memmove(dst, src, count);
  g_calls = g_calls + 1;
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void*, const void*, size_t, enum cudaMemcpyKind, cudaStream_t) {
  g_calls = g_calls + 1;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  CUresult r = cuStreamSynchronize(stream);
  g_calls = g_calls + 1;
  return static_cast<cudaError_t>(r);
}
}
