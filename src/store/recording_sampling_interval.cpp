#include "store/recording_sampling_interval.h"

#include <algorithm>
#include <map>

#include "analyze/reveal/window_sizing.h"

namespace stackscope {

namespace {
struct EnoughSamples {};  // thrown to stop the replay early (not a std::exception: nothing else catches it)
constexpr size_t kMaxRuns = 4096;
}  // namespace

std::optional<int64_t> recording_sampling_interval(const RecordingReader& reader) {
  analyze::SamplingIntervalEstimator est;
  std::map<SeriesId, size_t> gaps;
  size_t runs = 0;
  try {
    reader.for_each_sample_run([&](const SeriesInfo& s, std::span<const int64_t> t, std::span<const double>) {
      est.add_run(s.id, t);
      gaps[s.id] += t.size();
      if (++runs >= kMaxRuns ||
          (gaps.size() == reader.series().size() && std::all_of(gaps.begin(), gaps.end(), [](const auto& g) {
             return g.second > analyze::SamplingIntervalEstimator::kKeptGaps;
           })))
        throw EnoughSamples{};
    });
  } catch (const EnoughSamples&) {
  }
  return est.interval_ns();
}

}  // namespace stackscope
