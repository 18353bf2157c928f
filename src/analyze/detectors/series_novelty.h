// A causal detector for one series at a time (imported tables, host telemetry): each new bin is compared with
// the range its recent past spanned, on four views -- the bin's value (spikes, bursts), the mean of the last few
// bins (level shifts), their spread (a series that goes flat or turns noisy) and the median absolute deviation of
// the last robust_spread_bins (a change of texture that isolated spikes hide from the spread) -- and, where a day
// holds few enough bins, one more: the level's change since the same time a day earlier, give or take
// season_tolerance_bins (judged only once a day has passed and the view's own range has warmup_bins real values:
// before that it has no history to be compared with). A finding opens when one view leaves the range by more than
// `threshold` of its width, and stays open while any view is outside, so a level shift is one finding for as long
// as it lasts, not two at its edges. The range is not updated while a finding is open (the anomaly must not become
// its own baseline; only the day view learns a short finding's values once it closed, clipped: season_learn_clip)
// unless it stays open for a week (within 100 .. 2000 bins; see hold_bins()): then it is taken as the new normal
// and the finding ends there, saying so. A finding the range learns from ends where a new departure from the
// learnt range opens one (new_departure_ends_held_finding). A finding's value, level and spreads are remembered for
// a while after it (repeat_memory_bins): a repeat no larger is no new finding. Counters that sit at zero get a
// range of at least range_floor (the series' resolution), so one stray event is not a burst but a hundred are. A
// range with (almost) no width never yields an excess above kMaxExcess. A finding is reported only once a second
// view confirms it (confirm_median_bins).
// Streaming: O(robust_spread_bins + confirm_median_bins) work per bin and O(history_bins) memory per series; no
// look-ahead (a bin is judged on the bins before it), which is what NAB's scoring and a live recorder need.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace stackscope::analyze {

struct SeriesNoveltyOptions {
  // Excess beyond the recent range, as a share of its width, that opens a finding. Chosen on half of NAB's
  // files with repeat_memory_bins (eval/nab/run_cli.sh, docs/benchmarks/host-series-nab.md).
  double threshold = 0.05;
  size_t history_bins = 4000;   // the recent past the range spans
  size_t short_bins = 6;        // bins the level and spread views average over
  size_t warmup_bins = 100;     // bins of history before anything is judged (and a season, where one is given)
  // After a finding opens, no new one opens for cooldown_bins bins (100: docs/benchmarks/host-series-nab.md), and
  // for at most cooldown_max_seconds where the bin width is known (a day: on daily data 100 bins would be 100
  // days) ...
  size_t cooldown_bins = 100;
  double cooldown_max_seconds = 86400;
  // ... unless its excess is this many range widths (whatever the threshold: a far larger excess, not a multiple of
  // the sensitivity) and above the last one's.
  double cooldown_override_excess = 2.0;
  size_t close_after_bins = 3;  // a finding closes after this many bins back inside the range
  // A finding the range learns from (open past learn_after_bins) ends where a departure from the learnt range would
  // open a new finding (outside it, cool-down over or overridden), and that new finding opens at its bin: a level
  // shift held open as one finding hid a second, larger step (NAB's rds_cpu_utilization_e47b3b: a 17 -> 28 step
  // reported 400 bins late; docs/benchmarks/host-series-nab.md).
  bool new_departure_ends_held_finding = true;
  // A level shift held until the range learnt from it is one finding until its value returns to the range it left
  // (docs/benchmarks/host-series-nab.md): a new departure ends it only while its value is still outside that range
  // (the return is its end, not a new finding); it comes back if that departure's finding ends unreported (noise
  // within the shift: it used to end a held shift at once, and its return was then a finding of its own); and once it
  // ended at its return, the spread views are not judged for robust_spread_bins (at least short_bins), whose windows
  // straddle the return.
  bool held_shift_lasts_to_its_return = true;
  // When the range starts learning from a held finding, its first short_bins bins are clipped in the day view's
  // history to the range of its bins since: a shift that begins with a spike would come back a day later as a
  // day-view finding (NAB's rds_cpu_utilization_e47b3b).
  bool held_start_clipped_in_day_history = true;
  // A finding open for new_normal_seconds (a week) where the bin width is known, but at least min_hold_bins and at
  // most max_hold_bins, has become the new normal (a change of regime): its level becomes the baseline. Without
  // a bin width: max_hold_bins. Until then a level shift is one finding for as long as it lasts.
  double new_normal_seconds = 7 * 86400;
  // The range learns from a finding's bins once it has been open this long (a range too young to have seen a whole
  // day must grow); the finding goes on against the range it left.
  size_t learn_after_bins = 100;
  size_t min_hold_bins = 100;
  size_t max_hold_bins = 2000;
  double bin_seconds = 0;       // the bins' width when the caller knows it (0: durations in bins only)
  double range_floor = 0;       // the smallest range width an excess is measured against
  // Bins in one season (a day) when the caller knows it (0: none): a fourth view, the level's change from the same
  // time one season earlier, catches a daily pattern that changes shape without leaving its range. Its excess
  // counts season_weight as much as the others' (it is the noisiest view: one day against one day). 0.25, chosen
  // on NAB's part A with the threshold (0.2 scores a little higher on A but sits next to a cliff: 0.15 loses two
  // windows). At 0.3, three false positives on part A are day-view excesses of 0.17-0.21 range widths
  // (docs/benchmarks/host-series-nab.md).
  size_t season_bins = 0;
  double season_weight = 0.25;
  // The season view compares the level with the levels of the same time a day earlier shifted by up to this many
  // bins either way (a daily pattern that runs a little early or late has not changed): its value is the distance
  // to the nearest of them, 0 within them.
  size_t season_tolerance_bins = 2;
  // A view of the series' texture robust to single spikes: the median absolute deviation from the median of the
  // last robust_spread_bins values (the bin's own included; the upper median of an even count). A sustained change
  // of texture (a flat metric that starts oscillating, a Twitter volume that sits at a plateau among spikes) stays
  // inside the value range and is hidden from the short spread by isolated spikes; the median absolute deviation
  // ignores them. Its excess counts robust_spread_weight as much as the others', and its range width is at least
  // robust_spread_floor times the value range's width (a series that was flat but for its spikes has a deviation
  // range of almost no width: a wobble is not a change of texture).
  // docs/benchmarks/host-series-nab.md. 0 bins: off.
  size_t robust_spread_bins = 36;
  double robust_spread_weight = 0.5;
  double robust_spread_floor = 0.03;
  // A short finding (closed before learn_after_bins) is not learnt by the value, level and spread ranges (the next
  // anomaly of its size must still be found), but its day-view values are, clipped to this many range widths
  // beyond the day view's range: a daily shape that changed once (a job moved to another hour) is then new for a
  // day or two, not every day for a week. Negative: never.
  double season_learn_clip = 0.5;
  // A finding's value, level, spread and robust spread are remembered for repeat_memory_bins bins after it ends (at
  // most repeat_memory_max_seconds where the bin width is known): those views are judged against their range widened
  // to the remembered values (excess still in widths of the range itself). On heavy-tailed series a big spike is
  // followed by smaller ones that are new records of the range (which never learns a finding) but not new: NAB's
  // Twitter files had 94 of 138 false positives, mostly such. A repeat larger than the remembered finding is new, and
  // so is the same one once the memory has passed (NAB labels repeats days apart). 0: off. Chosen on NAB's part A
  // with the threshold (docs/benchmarks/host-series-nab.md).
  size_t repeat_memory_bins = 1000;
  double repeat_memory_max_seconds = 7 * 86400;
  // A finding held until the range learnt from it (a level shift, now the new normal) leaves its value and level
  // remembered (the range, which starts learning only then, would find the shift's own level new again) but not
  // its spreads: its first bins' spreads straddle the step, and remembered they blinded both spread views for
  // repeat_memory_bins (NAB's rds_cpu_utilization_cc0c53: a noisier stretch 400 bins after a level shift went
  // unseen).
  bool remember_learnt_spreads = false;
  // Confirmation by a second view: a finding is reported only from the first of its bins where its
  // excess passes confirm_alone_excess or a second detector agrees -- the same range detector run on the value
  // minus the median of the confirm_median_bins bins before it (a departure from the local level, whatever the
  // series' heavy tail did before), whose largest excess over the last confirm_lag_bins + 1 bins passes
  // confirm_excess. A finding never confirmed is not reported (it still holds the ranges and starts a cool-down, as
  // any finding). On heavy-tailed series a new record of the range by a hair is mostly noise: on NAB's files with 96
  // bins, false positives 98 -> 61 at the same 68 windows, but the settings part A chose then lost windows on part B
  // (docs/benchmarks/host-series-nab.md). On by default: chosen on NAB's part A together with the yield to a new
  // departure and the robust spread. 0 bins: off.
  size_t confirm_median_bins = 192;
  double confirm_excess = 0.05;
  double confirm_alone_excess = 0.3;
  size_t confirm_lag_bins = 3;
};

enum class NoveltyView : uint8_t { value = 0, level, spread, season, robust_spread };
std::string_view novelty_view_name(NoveltyView v);
// "value", "level (mean of the last 6 bins)", "spread (...)", "change from a day earlier", "spread robust to single
// spikes (...)": for reports.
// The bin counts named are the options' (short_bins, robust_spread_bins).
std::string novelty_view_description(NoveltyView v, const SeriesNoveltyOptions& options);

struct NoveltySpan {
  // inclusive, in the caller's bin numbering; first_bin is the bin the finding was reported from (confirmed:
  // SeriesNoveltyOptions::confirm_median_bins), opened_bin the one where it left the range (the same, or earlier)
  size_t first_bin = 0, last_bin = 0;
  size_t opened_bin = 0;
  double score = 0;                       // the largest excess over the span, in range widths
  NoveltyView view = NoveltyView::value;  // the view that reached it
  double value = 0;                       // that view's value there
  double range_low = 0, range_high = 0;   // the range it left
  bool above = true;                      // above the range (else below)
  bool absorbed = false;                  // open longer than hold_bins(): the level became the new normal
};

// The largest excess a bin can score (in range widths): past it a range had (almost) no width, and a larger
// figure would say nothing more (a flat series that moves is maximally new, not 1e306 times).
inline constexpr double kMaxExcess = 1000;

class SeriesNoveltyDetector {
 public:
  explicit SeriesNoveltyDetector(SeriesNoveltyOptions options = {});
  size_t cooldown_bins() const { return cooldown_len_; }  // the options' cool-down in bins, time bound applied
  size_t hold_bins() const { return hold_len_; }          // bins a finding stays open before it is the new normal
  size_t repeat_memory_bins() const { return repeat_len_; }  // bins a finding's values are remembered after it
  // The next bin's value (bins in increasing order; gaps allowed). Returns its score (0 during warm-up).
  double add(size_t bin, double value);
  // Closes an open finding; call once after the last bin.
  void finish();
  // The reported findings. Final after finish(): before it, the last one can be taken back and go on (a held shift
  // whose departure's finding ends unreported: held_shift_lasts_to_its_return).
  const std::vector<NoveltySpan>& spans() const { return spans_; }

 private:
  static constexpr size_t kViews = 5;  // NoveltyView's
  // Minimum and maximum of the last `capacity` pushed values (monotonic deques).
  class SlidingRange {
   public:
    void push(uint64_t index, double v, size_t capacity);
    double low() const { return low_.front().second; }
    double high() const { return high_.front().second; }
    bool empty() const { return low_.empty(); }
    // Drops what was pushed `capacity` or more indices before `index` (a range that is read more often than pushed).
    void expire(uint64_t index, size_t capacity);

   private:
    std::deque<std::pair<uint64_t, double>> low_, high_;
  };

  SeriesNoveltyOptions opt_;
  size_t warmup_len_ = 0, cooldown_len_ = 0, hold_len_ = 0, repeat_len_ = 0;
  SlidingRange range_[kViews];
  // The value, level, spread and robust spread of recent findings (repeat_memory_bins), indexed by bins added; and
  // the open finding's, until it closes or the range learns from it. Not the season view (it learns a finding's
  // values instead: season_learn_clip).
  static constexpr size_t kRememberedViews = 4;
  static constexpr size_t kRememberedView[kRememberedViews] = {0, 1, 2, 4};  // their NoveltyView
  SlidingRange remembered_[kRememberedViews];
  std::vector<std::array<double, kRememberedViews>> remember_pending_;
  uint64_t added_ = 0;  // bins added (finite values)
  uint64_t pushed_ = 0;         // bins that entered the ranges
  uint64_t season_pushed_ = 0;  // of them, with a season view (a bin a season earlier to compare with)
  std::deque<double> recent_;
  std::deque<double> robust_recent_;     // the last robust_spread_bins values
  std::vector<double> robust_scratch_;   // their copy, for the medians
  // (bin, value) over the last season + short + hold + close_after bins, for the season view (by bin, not by
  // arrival: a table with gaps still compares with the same time a day earlier).
  std::deque<std::pair<size_t, double>> past_;
  size_t cooldown_ = 0, quiet_ = 0, held_ = 0;
  std::optional<NoveltySpan> open_;
  bool learning_ = false;  // the open finding outlasted learn_after_bins: the range learns, the finding goes on
  std::pair<double, double> reference_[2];  // then: the value and level ranges it left
  // Excess of `v` beyond lo .. hi in widths of width_lo .. width_hi (the width floored, also at min_width; the
  // excess at most kMaxExcess); without them, in widths of lo .. hi.
  double excess_over(double v, double lo, double hi) const { return excess_over(v, lo, hi, lo, hi); }
  double excess_over(double v, double lo, double hi, double width_lo, double width_hi, double min_width = 0) const;
  // The open finding's day-view values (none where the view is undefined) until it closes or the range learns.
  std::vector<std::optional<double>> season_pending_;
  std::optional<size_t> last_value_bin_;  // the open span's last bin where the value itself was outside
  double last_score_ = 0;  // the last finding's score (cool-down override)
  size_t last_bin_ = 0;  // the latest bin added
  std::vector<NoveltySpan> spans_;
  // The confirming view (confirm_median_bins > 0): its detector, the values its median is taken over, its last
  // scores, and the bin the open finding was confirmed at.
  std::unique_ptr<SeriesNoveltyDetector> confirm_;
  std::deque<double> confirm_values_, confirm_scores_;
  std::vector<double> median_scratch_;
  std::optional<size_t> reported_bin_;
  // held_shift_lasts_to_its_return: the held finding a departure ended, until that departure's finding closes (it
  // comes back if that one was never reported); whether this bin's value is back in the range the held finding
  // left; bins the spread views are left unjudged after a held finding's return.
  struct YieldedFinding {
    NoveltySpan span;
    std::optional<size_t> reported_bin;
    std::pair<double, double> reference[2];
    size_t held = 0;
    uint64_t at = 0;      // added_ when it yielded
    bool listed = false;  // it went into spans_ (reported)
  };
  std::optional<YieldedFinding> yielded_;
  bool value_back_ = false;
  size_t spread_guard_ = 0;
  double confirming_excess(size_t bin, double value);
  void close();
  // The held finding `held` open again in place of the unreported finding that ended it.
  void give_back(YieldedFinding&& held);
  // The day view's history from `from_bin` on replaced by the bins a season earlier (a finding's bins).
  void replace_with_a_season_earlier(size_t from_bin);
  // The open finding's first short_bins bins in the day view's history clipped to the range of its values since.
  void clip_held_start_in_day_history();
  std::deque<std::pair<size_t, double>>::iterator bin_at_or_after(size_t bin);
};

}  // namespace stackscope::analyze
