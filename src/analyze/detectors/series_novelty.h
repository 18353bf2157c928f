// A causal detector for one series at a time (imported tables, host telemetry): each new bin is compared with
// the range its recent past spanned, on three views -- the bin's value (spikes, bursts), the mean of the last
// few bins (level shifts) and their spread (a series that goes flat or turns noisy) -- and, where a day holds few
// enough bins, a fourth: the level's change since the same time a day earlier. A finding opens when one
// view leaves the range by more than `threshold` of its width, and stays open while any view is outside, so a
// level shift is one finding for as long as it lasts, not two at its edges. The range is not updated while a
// finding is open (the anomaly must not become its own baseline) unless it lasts longer than max_hold_bins:
// then it is taken as the new normal and the finding ends there, saying so. Counters that sit at zero get a
// range of at least range_floor (the series' resolution), so one stray event is not a burst but a hundred are.
// Streaming: O(1) amortised work and O(history_bins) memory per series; no look-ahead (a bin is judged on the
// bins before it), which is what NAB's scoring and a live recorder need.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace stackscope::analyze {

struct SeriesNoveltyOptions {
  // Excess beyond the recent range, as a share of its width, that opens a finding. Chosen on half of NAB's
  // files (eval/nab/run_cli.sh, docs/BENCHMARKS.md "Host series nobody tuned for").
  double threshold = 0.065;
  size_t history_bins = 2000;   // the recent past the range spans
  size_t short_bins = 6;        // bins the level and spread views average over
  size_t warmup_bins = 100;     // bins of history before anything is judged
  size_t cooldown_bins = 200;   // after a finding opens, no new one opens for this many bins ...
  double cooldown_override = 40;  // ... unless its excess is this many thresholds and above the last one's
  size_t close_after_bins = 3;  // a finding closes after this many bins back inside the range
  size_t max_hold_bins = 100;   // longer open: the new level becomes the baseline
  double range_floor = 0;       // the smallest range width an excess is measured against
  // Bins in one season (a day) when the caller knows it (0: none): a fourth view, the level's change from the same
  // time one season earlier, catches a daily pattern that changes shape without leaving its range. Its excess
  // counts season_weight as much as the others' (it is the noisiest view).
  size_t season_bins = 0;
  double season_weight = 0.3;
};

enum class NoveltyView : uint8_t { value = 0, level, spread, season };
std::string_view novelty_view_name(NoveltyView v);
// "value", "level (mean of the last 6 bins)", "spread (...)", "change from a day earlier": for reports.
std::string novelty_view_description(NoveltyView v, size_t short_bins);

struct NoveltySpan {
  size_t first_bin = 0, last_bin = 0;     // inclusive, in the caller's bin numbering
  double score = 0;                       // the largest excess over the span, in range widths
  NoveltyView view = NoveltyView::value;  // the view that reached it
  double value = 0;                       // that view's value there
  double range_low = 0, range_high = 0;   // the range it left
  bool above = true;                      // above the range (else below)
  bool absorbed = false;                  // lasted past max_hold_bins: the level became the new normal
};

class SeriesNoveltyDetector {
 public:
  explicit SeriesNoveltyDetector(SeriesNoveltyOptions options = {});
  // The next bin's value (bins in increasing order; gaps allowed). Returns its score (0 during warm-up).
  double add(size_t bin, double value);
  // Closes an open finding; call once after the last bin.
  void finish();
  const std::vector<NoveltySpan>& spans() const { return spans_; }

 private:
  static constexpr size_t kViews = 4;
  // Minimum and maximum of the last `capacity` pushed values (monotonic deques).
  class SlidingRange {
   public:
    void push(uint64_t index, double v, size_t capacity);
    double low() const { return low_.front().second; }
    double high() const { return high_.front().second; }
    bool empty() const { return low_.empty(); }

   private:
    std::deque<std::pair<uint64_t, double>> low_, high_;
  };

  SeriesNoveltyOptions opt_;
  SlidingRange range_[kViews];
  uint64_t pushed_ = 0;  // values that entered the range
  std::deque<double> recent_;
  // (bin, value) over the last season + short + max_hold + close_after bins, for the season view (by bin, not by
  // arrival: a table with gaps still compares with the same time a day earlier).
  std::deque<std::pair<size_t, double>> past_;
  size_t cooldown_ = 0, quiet_ = 0, held_ = 0;
  std::optional<NoveltySpan> open_;
  std::optional<size_t> last_value_bin_;  // the open span's last bin where the value itself was outside
  double last_score_ = 0;  // the last finding's score (cool-down override)
  size_t last_bin_ = 0;  // the latest bin added
  std::vector<NoveltySpan> spans_;
  void close();
  std::deque<std::pair<size_t, double>>::iterator bin_at_or_after(size_t bin);
};

}  // namespace stackscope::analyze
