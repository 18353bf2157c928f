// Subject for the late-library test: maps libnccl.so.2 with dlopen only when told, then calls it.
//   fake_dlopen LIBDIR: print "ready", wait for a line, dlopen, print "loaded", wait for a line, call, "done"
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "fake_gpu_api.h"

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  char buf[64];
  std::printf("ready %d\n", getpid());
  if (!std::fgets(buf, sizeof buf, stdin)) return 2;
  void* h = dlopen((std::string(argv[1]) + "/libnccl.so.2").c_str(), RTLD_NOW);
  if (!h) {
    std::printf("dlopen failed: %s\n", dlerror());
    return 1;
  }
  auto all_reduce = reinterpret_cast<decltype(&ncclAllReduce)>(dlsym(h, "ncclAllReduce"));
  std::printf("loaded\n");
  if (!std::fgets(buf, sizeof buf, stdin)) return 2;
  static float data[64];
  all_reduce(data, data, 64, ncclFloat32, ncclAvg, nullptr, nullptr);
  std::printf("done\n");
  return 0;
}
