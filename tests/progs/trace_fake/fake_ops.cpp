// Subject for the probe-cost tests: calls the fake libtorch_cpu.so's operators.
//   fake_ops calls N          print "ready", wait for a line, call op10 N times and op11 once, print "done"
//   fake_ops hot SECONDS US   print "ready", wait for a line, for SECONDS call op10 then spin US microseconds,
//                             print "done CALLS"
//   fake_ops steps SECONDS N  print "ready", wait for a line, for SECONDS: N op10 calls then a 2 ms sleep; print
//                             "done STEPS" (bench/toggle_cost: the subject's CPU time per step)
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "fake_torch.h"

static double now_s() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

static void wait_line() {
  char buf[64];
  if (!std::fgets(buf, sizeof buf, stdin)) std::exit(2);
}

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string mode = argc > 1 ? argv[1] : "";
  long x = 0;
  if (mode == "calls" && argc > 2) {
    std::printf("ready\n");
    wait_line();
    for (long i = 0, n = std::atol(argv[2]); i < n; ++i) x = fake_torch_op10(x);
    x = fake_torch_op11(x);
    std::printf("done %ld\n", x > 0 ? 0L : 1L);
    return 0;
  }
  if (mode == "steps" && argc > 3) {  // SECONDS of steps, each N operator calls then a 2 ms sleep (the GPU's wait)
    std::printf("ready\n");
    wait_line();
    const long n = std::atol(argv[3]);
    long steps = 0;
    for (const double end = now_s() + std::atof(argv[2]); now_s() < end; ++steps) {
      for (long i = 0; i < n; ++i) x = fake_torch_op10(x);
      timespec nap{0, 2'000'000};
      nanosleep(&nap, nullptr);
    }
    std::printf("done %ld\n", steps);
    return x == 42 ? 3 : 0;
  }
  if (mode == "hot" && argc > 3) {
    const double seconds = std::atof(argv[2]), spin = std::atof(argv[3]) / 1e6;
    std::printf("ready\n");
    wait_line();
    long calls = 0;
    const double end = now_s() + seconds;
    for (double t = now_s(); t < end;) {
      x = fake_torch_op10(x);
      ++calls;
      for (double until = t + spin; (t = now_s()) < until;) {
      }
    }
    std::printf("done %ld\n", calls);
    return x == 42 ? 3 : 0;
  }
  return 2;
}
