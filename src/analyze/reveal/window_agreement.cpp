#include "analyze/reveal/window_agreement.h"

#include <algorithm>

namespace stackscope::analyze {

std::vector<Interval> merge_intervals(std::vector<Interval> in) {
  std::erase_if(in, [](const Interval& i) { return i.end <= i.start; });
  std::sort(in.begin(), in.end(), [](const Interval& x, const Interval& y) { return x.start < y.start; });
  std::vector<Interval> out;
  for (const Interval& i : in) {
    if (!out.empty() && i.start <= out.back().end)
      out.back().end = std::max(out.back().end, i.end);
    else
      out.push_back(i);
  }
  return out;
}

int64_t covered_length(const std::vector<Interval>& merged) {
  int64_t total = 0;
  for (const Interval& i : merged) total += i.end - i.start;
  return total;
}

namespace {
// Length of the intersection of two merged (sorted, disjoint) interval lists.
int64_t intersection_length(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  int64_t total = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    int64_t lo = std::max(a[i].start, b[j].start), hi = std::min(a[i].end, b[j].end);
    if (hi > lo) total += hi - lo;
    if (a[i].end < b[j].end) ++i; else ++j;
  }
  return total;
}
}  // namespace

WindowAgreement window_agreement(const std::vector<Interval>& a_in, const std::vector<Interval>& b_in) {
  const auto a = merge_intervals(a_in), b = merge_intervals(b_in);
  WindowAgreement r;
  r.segments_a = a.size();
  r.segments_b = b.size();
  r.length_a = covered_length(a);
  r.length_b = covered_length(b);
  r.length_both = intersection_length(a, b);
  const int64_t uni = r.length_a + r.length_b - r.length_both;
  r.iou = uni > 0 ? static_cast<double>(r.length_both) / static_cast<double>(uni) : 1.0;
  r.hit_by_length = r.length_a > 0 ? static_cast<double>(r.length_both) / static_cast<double>(r.length_a) : 1.0;
  size_t hits = 0;
  for (const Interval& s : a) {
    // b is sorted: the first segment ending after s.start is the only candidate that can start before s.end.
    auto it = std::upper_bound(b.begin(), b.end(), s.start, [](int64_t t, const Interval& x) { return t < x.end; });
    if (it != b.end() && it->start < s.end) ++hits;
  }
  r.hit_by_count = a.empty() ? 1.0 : static_cast<double>(hits) / static_cast<double>(a.size());
  return r;
}

}  // namespace stackscope::analyze
