// Reveal §5.5: how much two sets of anomaly intervals (e.g. from 3 s/1 s and 1.5 s/0.5 s windows) agree.
// IoU over merged intervals by covered length; hit rate byCount (segments of A touching any segment of B)
// and byLength (share of A's length covered by B).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace stackscope::analyze {

struct Interval {
  int64_t start = 0;
  int64_t end = 0;  // exclusive
};

// Sorted, overlapping or touching intervals joined; empty ones dropped.
std::vector<Interval> merge_intervals(std::vector<Interval> intervals);
int64_t covered_length(const std::vector<Interval>& merged);

struct WindowAgreement {
  double iou = 0;               // 1 when both are empty
  double hit_by_count = 0;      // of A's merged segments, the fraction intersecting B (1 when A is empty)
  double hit_by_length = 0;     // of A's covered length, the fraction covered by B (1 when A is empty)
  int64_t length_a = 0, length_b = 0, length_both = 0;
  size_t segments_a = 0, segments_b = 0;
};

WindowAgreement window_agreement(const std::vector<Interval>& a, const std::vector<Interval>& b);

}  // namespace stackscope::analyze
