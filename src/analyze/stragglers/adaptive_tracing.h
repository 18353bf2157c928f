// KAIR Feature 2 (adaptive sampling): a cheap per-step signal, the spread of iteration time across workers,
// turns detailed tracing on for the suspects (the slowest workers) plus a random set of peers to compare
// them with, and off again once the spread has stayed low for a while. A pure policy: it decides, the
// recorder acts.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace stackscope::analyze {

struct AdaptiveTracingOptions {
  double on_threshold = 0.10;  // coefficient of variation (s.d./mean) of step time across workers that turns tracing on
  double off_threshold = 0.05; // below this for `calm_steps` steps in a row turns it off (hysteresis)
  int calm_steps = 5;
  int min_detailed_steps = 3;  // once on, stay on at least this many steps (a trace needs a few steps)
  double suspect_z = 2.0;      // suspects: step time above the median by this many robust s.d. (1.4826 MAD)
  int max_suspects = 8;
  int random_peers = 4;        // healthy workers traced alongside, for comparison
  uint64_t seed = 1;
};

struct TracingDecision {
  bool detailed = false;          // detailed tracing on for this step
  bool changed = false;           // on/off switched at this step
  double signal = 0;              // coefficient of variation of this step's times
  std::vector<int> suspects;      // workers whose slowness triggered tracing (slowest first)
  std::vector<int> traced;        // suspects + random peers (sorted); empty while off
};

class AdaptiveTracingPolicy {
 public:
  explicit AdaptiveTracingPolicy(AdaptiveTracingOptions options = {}) : opt_(options), rng_(options.seed) {}
  // One step's iteration time per worker (any unit; NaN or negative values are ignored).
  TracingDecision observe_step(std::span<const double> step_times);
  bool detailed() const { return on_; }

 private:
  AdaptiveTracingOptions opt_;
  std::mt19937_64 rng_;
  bool on_ = false;
  int calm_ = 0, on_for_ = 0;
  std::vector<int> traced_, suspects_;
};

}  // namespace stackscope::analyze
