// Subject for the tracer tests: calls the fake CUDA/NCCL libraries with known arguments.
//   fake_app calls          print "ready", wait for a line on stdin, make the calls, print "done"
//   fake_app spawn N DIR    after a line on stdin, run N children (`child DIR`) one after another
//   fake_app child DIR      wait until DIR/go.<pid> exists, make the calls, exit
//   fake_app launches N     after a line on stdin: N runtime launches and N/2 direct driver launches, then one
//                           stream synchronisation; prints "done"
//   fake_app longjmp N      after a line on stdin: N stream synchronisations that a signal handler leaves with
//                           siglongjmp (the probed runtime and driver calls never return), then 3 launches
#include <chrono>
#include <setjmp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/time.h>
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

static sigjmp_buf g_jump;
static void jump_out(int) { siglongjmp(g_jump, 1); }

// cuStreamSynchronize waits 2 ms; a timer signal 0.5 ms into it jumps back here, out of both probed calls.
static int interrupted_syncs(int n) {
  struct sigaction sa {};
  sa.sa_handler = jump_out;
  sigaction(SIGALRM, &sa, nullptr);
  int jumped = 0;
  for (int i = 0; i < n; ++i) {
    if (sigsetjmp(g_jump, 1) != 0) {
      ++jumped;
      continue;
    }
    itimerval t{{0, 0}, {0, 500}};
    setitimer(ITIMER_REAL, &t, nullptr);
    cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(0x5000));
  }
  return jumped;
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
  if (mode == "launches" && argc > 2) {
    std::printf("ready %d\n", getpid());
    wait_line();
    void* kargs[1] = {nullptr};
    auto stream = reinterpret_cast<cudaStream_t>(0x5000);
    int n = std::atoi(argv[2]);
    for (int i = 0; i < n; ++i)
      cudaLaunchKernel(reinterpret_cast<const void*>(&vector_add_stub), dim3{}, dim3{}, kargs, 0, stream);
    for (int i = 0; i < n / 2; ++i)
      cuLaunchKernel(reinterpret_cast<CUfunction>(0x77), 1, 1, 1, 1, 1, 1, 0, stream, kargs, nullptr);
    cudaStreamSynchronize(stream);
    std::printf("done\n");
    return 0;
  }
  if (mode == "steps" && argc > 3) {  // a launch-bound loop: SECONDS of steps, each N launches then a sync
    std::printf("ready %d\n", getpid());
    wait_line();
    void* kargs[1] = {nullptr};
    auto stream = reinterpret_cast<cudaStream_t>(0x5000);
    const int launches = std::atoi(argv[3]);
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(std::atof(argv[2]));
    long steps = 0;
    while (std::chrono::steady_clock::now() < end) {
      for (int i = 0; i < launches; ++i)
        cudaLaunchKernel(reinterpret_cast<const void*>(&vector_add_stub), dim3{}, dim3{}, kargs, 0, stream);
      cudaStreamSynchronize(stream);
      ++steps;
    }
    std::printf("done %ld %ld\n", steps, steps * launches);
    return 0;
  }
  if (mode == "longjmp" && argc > 2) {
    std::printf("ready %d\n", getpid());
    wait_line();
    int jumped = interrupted_syncs(std::atoi(argv[2]));
    void* kargs[1] = {nullptr};
    for (int i = 0; i < 3; ++i)
      cudaLaunchKernel(reinterpret_cast<const void*>(&vector_add_stub), dim3{}, dim3{}, kargs, 0, nullptr);
    std::printf("done %d\n", jumped);
    return 0;
  }
  if (mode == "child" && argc > 2) {
    std::string go = std::string(argv[2]) + "/go." + std::to_string(getpid());
    struct stat st {};
    for (int i = 0; i < 2000 && ::stat(go.c_str(), &st) != 0; ++i) usleep(10'000);
    make_calls();
    return 0;
  }
  std::fprintf(stderr, "usage: %s calls | spawn N DIR | child DIR | launches N | steps SECONDS N | longjmp N\n", argv[0]);
  return 2;
}
