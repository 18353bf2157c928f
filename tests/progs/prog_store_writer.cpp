// Writes events and samples into a recording forever, printing how many it has handed to the writer each
// time a flush committed, so a test can kill -9 it and check that the file keeps what was committed.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "model/clock.h"
#include "store/recording_writer.h"

using namespace stackscope;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE [--no-explicit-flush]\n", argv[0]);
    return 2;
  }
  // Without explicit flushes only the writer's own timer commits: that is what bounds the loss on a crash.
  const bool explicit_flush = !(argc > 2 && std::string(argv[2]) == "--no-explicit-flush");
  RecordingWriter w(argv[1]);
  SeriesId s = w.add_series({0, "test.counter", Subsystem::software, "count", SeriesKind::counter,
                             SeriesCategory::event_counter, "h", "", "test"});
  for (int64_t i = 0;; ++i) {
    Event e;
    e.layer = Layer::cuda;
    e.name = "cudaLaunchKernel";
    e.pid = static_cast<uint32_t>(getpid());
    e.tid = e.pid;
    e.start_ns = monotonic_ns();
    e.duration_ns = 1000;
    e.args = {{"seq", i}};
    w.append_event(std::move(e));
    Sample smp{s, monotonic_ns(), static_cast<double>(i)};
    w.append_samples({&smp, 1});
    if (!explicit_flush) {
      if (i == 0) std::printf("started\n"), std::fflush(stdout);
      usleep(100);
    } else if (i % 1000 == 999) {
      w.flush();
      // After flush() returns, everything up to i is committed.
      std::printf("committed %lld\n", static_cast<long long>(i + 1));
      std::fflush(stdout);
    }
  }
}
