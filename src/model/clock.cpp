#include "model/clock.h"

#include <time.h>

#include <limits>

namespace stackscope {

namespace {
int64_t read(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}
}  // namespace

int64_t monotonic_ns() { return read(CLOCK_MONOTONIC); }
int64_t realtime_ns() { return read(CLOCK_REALTIME); }

int64_t realtime_offset_ns() {
  int64_t best_gap = std::numeric_limits<int64_t>::max(), best = 0;
  for (int i = 0; i < 8; ++i) {
    int64_t m0 = monotonic_ns(), r = realtime_ns(), m1 = monotonic_ns();
    if (m1 - m0 < best_gap) {
      best_gap = m1 - m0;
      best = r - (m0 + (m1 - m0) / 2);
    }
  }
  return best;
}

}  // namespace stackscope
