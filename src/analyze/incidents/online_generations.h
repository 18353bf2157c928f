// Which windows the online incident engine (online/online_detector.cpp: `record --detect`, the agent) evaluates at each
// pass. Builders ("generations") start every `span` windows on the recording's grid, each 2 x span windows long; a
// pass evaluates the windows so far of the oldest one kept, which is dropped once full. So a pass sees at most
// 2 x span windows whatever the job's age (its cost is bounded), and at least span once the job is that old (the
// steady level is judged over that much). A generation starts half a span before its first window, so it has
// every event of its windows. Pure.
#pragma once
#include <algorithm>
#include <cstddef>
#include <deque>

namespace stackscope::analyze::incidents {

class OnlineGenerations {
 public:
  explicit OnlineGenerations(size_t span) : span_(std::max<size_t>(1, span)) {}

  size_t span() const { return span_; }
  size_t grid_windows() const { return 2 * span_; }  // each generation's grid

  // The generation to start now, given `complete` windows so far (its first window), if one is due: the caller
  // makes its builder and calls started(). The first one (window 0) is due at once.
  bool start_due(size_t complete) const {
    return firsts_.empty() || complete + span_ / 2 >= firsts_.back() + span_;
  }
  size_t next_first() const { return firsts_.empty() ? 0 : firsts_.back() + span_; }
  void started() { firsts_.push_back(next_first()); }

  // Whether the oldest generation is full at `complete` windows (the caller drops its builder, then dropped()).
  bool drop_due(size_t complete) const { return firsts_.size() > 1 && complete >= firsts_.front() + 2 * span_; }
  void dropped() { firsts_.pop_front(); }

  // The generation a pass evaluates (the oldest) and how many of its windows: [first, first + n).
  size_t evaluated_first() const { return firsts_.empty() ? 0 : firsts_.front(); }
  size_t evaluated_windows(size_t complete) const {
    const size_t first = evaluated_first();
    return complete <= first ? 0 : std::min(complete - first, grid_windows());
  }
  const std::deque<size_t>& firsts() const { return firsts_; }

 private:
  size_t span_;
  std::deque<size_t> firsts_;  // oldest first
};

}  // namespace stackscope::analyze::incidents
