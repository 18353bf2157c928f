// Subject for the tracer tests: calls the fake CUDA/NCCL libraries with known arguments.
//   fake_app calls          print "ready", wait for a line on stdin, make the calls, print "done"
//   fake_app spawn N DIR    after a line on stdin, run N children (`child DIR`) one after another
//   fake_app child DIR      wait until DIR/go.<pid> exists, make the calls, exit
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "fake_gpu_api.h"

// The host stub a real nvcc build would pass to cudaLaunchKernel; the tracer names the kernel after it.
__attribute__((noinline)) void vector_add_stub(float* a, float* b, int n) {
  for (int i = 0; i < n; ++i) a[i] += b[i];
}

static void make_calls() {
  static char host[8192];
  void* dev = nullptr;
  cudaMalloc(&dev, 1 << 20);
  cudaMemcpy(dev, host, 4096, cudaMemcpyHostToDevice);
  auto stream = reinterpret_cast<cudaStream_t>(0x5000);
  cudaMemcpyAsync(host, dev, 2048, cudaMemcpyDeviceToHost, stream);
  void* kargs[2] = {host, host};
  dim3 grid{128, 2, 1}, block{256, 1, 1};
  for (int i = 0; i < 3; ++i)
    cudaLaunchKernel(reinterpret_cast<const void*>(&vector_add_stub), grid, block, kargs, 64, stream);
  CUfunction f = nullptr;
  cuModuleGetFunction(&f, reinterpret_cast<CUmodule>(0x3000), "triton_fused_kernel");
  for (int i = 0; i < 2; ++i) cuLaunchKernel(f, 7, 8, 9, 32, 4, 2, 128, stream, kargs, nullptr);
  cudaStreamSynchronize(stream);
  cudaFree(dev);

  ncclComm_t comm = nullptr;
  ncclUniqueId id{};
  ncclCommInitRank(&comm, 4, id, 2);
  ncclAllReduce(host, host, 1000, ncclFloat16, ncclSum, comm, stream);
  ncclAllGather(host, host, 10, ncclInt64, comm, stream);
  ncclReduce(host, host, 5, ncclFloat64, ncclMax, 1, comm, stream);
  ncclGroupStart();
  ncclSend(host, 3, ncclFloat32, 1, comm, stream);
  ncclGroupEnd();
}

static void wait_line() {
  char buf[64];
  if (!std::fgets(buf, sizeof buf, stdin)) std::exit(2);
}

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "calls";
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (mode == "calls") {
    std::printf("ready %d\n", getpid());
    wait_line();
    make_calls();
    std::printf("done\n");
    return 0;
  }
  if (mode == "spawn" && argc > 3) {
    std::printf("ready %d\n", getpid());
    wait_line();
    for (int i = 0; i < std::atoi(argv[2]); ++i) {
      pid_t c = fork();
      if (c == 0) {
        execl("/proc/self/exe", argv[0], "child", argv[3], static_cast<char*>(nullptr));
        _exit(127);
      }
      int st = 0;
      waitpid(c, &st, 0);
      std::printf("child %d exited %d\n", c, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    }
    std::printf("done\n");
    return 0;
  }
  if (mode == "child" && argc > 2) {
    std::string go = std::string(argv[2]) + "/go." + std::to_string(getpid());
    struct stat st {};
    for (int i = 0; i < 2000 && ::stat(go.c_str(), &st) != 0; ++i) usleep(10'000);
    make_calls();
    return 0;
  }
  std::fprintf(stderr, "usage: %s calls | spawn N DIR | child DIR\n", argv[0]);
  return 2;
}
