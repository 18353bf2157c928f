#include "analyze/detectors/series_novelty.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace stackscope::analyze {

std::string_view novelty_view_name(NoveltyView v) {
  switch (v) {
    case NoveltyView::value:
      return "value";
    case NoveltyView::level:
      return "level";
    case NoveltyView::spread:
      return "spread";
    case NoveltyView::season:
      return "daily_level";
    case NoveltyView::robust_spread:
      return "robust_spread";
  }
  return "value";
}

std::string novelty_view_description(NoveltyView v, const SeriesNoveltyOptions& options) {
  switch (v) {
    case NoveltyView::value: return "value";
    case NoveltyView::level: return "level (mean of the last " + std::to_string(options.short_bins) + " bins)";
    case NoveltyView::spread: return "spread (of the last " + std::to_string(options.short_bins) + " bins)";
    case NoveltyView::season: return "level's change from the same time a day earlier";
    case NoveltyView::robust_spread:
      return "spread robust to single spikes (median absolute deviation of the last " +
             std::to_string(options.robust_spread_bins) + " bins)";
  }
  return "value";
}

void SeriesNoveltyDetector::SlidingRange::push(uint64_t index, double v, size_t capacity) {
  while (!low_.empty() && low_.back().second >= v) low_.pop_back();
  low_.emplace_back(index, v);
  while (!high_.empty() && high_.back().second <= v) high_.pop_back();
  high_.emplace_back(index, v);
  while (low_.front().first + capacity <= index) low_.pop_front();
  while (high_.front().first + capacity <= index) high_.pop_front();
}

void SeriesNoveltyDetector::SlidingRange::expire(uint64_t index, size_t capacity) {
  while (!low_.empty() && low_.front().first + capacity <= index) low_.pop_front();
  while (!high_.empty() && high_.front().first + capacity <= index) high_.pop_front();
}

namespace {
// `seconds` in bins of `bin_seconds`, rounded down; `fallback` where either is unknown (<= 0).
size_t bins_in(double seconds, double bin_seconds, size_t fallback) {
  if (!(seconds > 0) || !(bin_seconds > 0)) return fallback;
  const double bins = std::floor(seconds / bin_seconds);
  return bins >= static_cast<double>(fallback) ? fallback : static_cast<size_t>(bins);
}
}  // namespace

SeriesNoveltyDetector::SeriesNoveltyDetector(SeriesNoveltyOptions options) : opt_(options) {
  if (!(opt_.threshold >= 0) || opt_.history_bins == 0 || opt_.short_bins == 0 || opt_.close_after_bins == 0 ||
      opt_.max_hold_bins == 0 || std::isnan(opt_.bin_seconds))
    throw std::invalid_argument(
        "series novelty: need threshold >= 0, history, short, close-after and hold bins > 0, a bin width");
  // Durations are bounded in time and in bins, so they mean the same on per-second and on daily data.
  cooldown_len_ = std::max<size_t>(1, bins_in(opt_.cooldown_max_seconds, opt_.bin_seconds, opt_.cooldown_bins));
  // Where the day is known, nothing is judged before a whole day was seen: a range that has not seen the day's
  // shape would call its every new part a finding (a daily spike every day).
  warmup_len_ = opt_.season_bins > 0 ? std::max(opt_.warmup_bins, opt_.season_bins) : opt_.warmup_bins;
  hold_len_ = std::max(std::min(opt_.min_hold_bins, opt_.max_hold_bins),
                       bins_in(opt_.new_normal_seconds, opt_.bin_seconds, opt_.max_hold_bins));
  repeat_len_ = opt_.repeat_memory_bins == 0
                    ? 0
                    : std::max<size_t>(1, bins_in(opt_.repeat_memory_max_seconds, opt_.bin_seconds,
                                                  opt_.repeat_memory_bins));
  if (opt_.confirm_median_bins > 0) {
    // The confirming detector only scores: it never opens a finding, so its ranges learn every bin.
    SeriesNoveltyOptions c = opt_;
    c.threshold = std::numeric_limits<double>::infinity();
    c.confirm_median_bins = 0;
    confirm_ = std::make_unique<SeriesNoveltyDetector>(c);
  }
}

double SeriesNoveltyDetector::confirming_excess(size_t bin, double value) {
  // The value against the median of the bins before it (the upper median of an even count; the value itself first).
  double median = value;
  if (!confirm_values_.empty()) {
    median_scratch_.assign(confirm_values_.begin(), confirm_values_.end());
    const auto mid = median_scratch_.begin() + static_cast<std::ptrdiff_t>(median_scratch_.size() / 2);
    std::nth_element(median_scratch_.begin(), mid, median_scratch_.end());
    median = *mid;
  }
  confirm_values_.push_back(value);
  if (confirm_values_.size() > opt_.confirm_median_bins) confirm_values_.pop_front();
  confirm_scores_.push_back(confirm_->add(bin, value - median));
  if (confirm_scores_.size() > opt_.confirm_lag_bins + 1) confirm_scores_.pop_front();
  return *std::max_element(confirm_scores_.begin(), confirm_scores_.end());
}

double SeriesNoveltyDetector::add(size_t bin, double value) {
  if (!std::isfinite(value)) return 0;
  const double confirming = confirm_ ? confirming_excess(bin, value) : 0;
  recent_.push_back(value);
  if (recent_.size() > opt_.short_bins) recent_.pop_front();
  // Summed afresh (a few values): running sums would drift by rounding over millions of bins.
  double sum = 0;
  for (double x : recent_) sum += x;
  const double n = static_cast<double>(recent_.size());
  const double level = sum / n;
  double sq = 0;
  for (double x : recent_) sq += (x - level) * (x - level);
  const double spread = std::sqrt(sq / n);
  // Season view: this level minus the level of the same bins one season earlier; none until a season has passed
  // (it is then neither judged nor remembered: a 0 there would make a range of 0 .. 0 to be judged against).
  double season = 0;
  bool season_defined = false;
  last_bin_ = bin;
  if (opt_.season_bins > 0) {
    past_.emplace_back(bin, value);
    const size_t tol = opt_.season_tolerance_bins;
    const size_t keep = opt_.season_bins + opt_.short_bins + tol + hold_len_ + opt_.close_after_bins;
    while (past_.front().first + keep < bin) past_.pop_front();
    if (bin + 1 >= opt_.season_bins + opt_.short_bins + tol) {
      // The level view's bins one season earlier, shifted by up to `tol` bins either way: the day's pattern
      // jitters (a daily job starts a few minutes early or late), and a level within the levels of that neighbourhood
      // has not changed from a day earlier. Beyond them, the change is the distance to the nearest.
      double then_low = 0, then_high = 0;
      bool any = false;
      for (size_t shift = 0; shift <= 2 * tol; ++shift) {
        const size_t hi = bin + tol - shift - opt_.season_bins, lo = hi + 1 - opt_.short_bins;
        double then = 0;
        size_t m = 0;
        for (auto it = bin_at_or_after(lo); it != past_.end() && it->first <= hi; ++it, ++m) then += it->second;
        if (m == 0) continue;
        then /= static_cast<double>(m);
        then_low = any ? std::min(then_low, then) : then;
        then_high = any ? std::max(then_high, then) : then;
        any = true;
      }
      if (any) {
        season = level - std::clamp(level, then_low, then_high);
        season_defined = true;
      }
    }
  }
  // Robust spread: the median absolute deviation from the median of the last robust_spread_bins values (this one
  // included; upper medians), blind to the isolated spikes that move the short spread.
  double robust_spread = 0;
  if (opt_.robust_spread_bins > 0) {
    robust_recent_.push_back(value);
    if (robust_recent_.size() > opt_.robust_spread_bins) robust_recent_.pop_front();
    robust_scratch_.assign(robust_recent_.begin(), robust_recent_.end());
    const auto mid = robust_scratch_.begin() + static_cast<std::ptrdiff_t>(robust_scratch_.size() / 2);
    std::nth_element(robust_scratch_.begin(), mid, robust_scratch_.end());
    const double median = *mid;
    for (double& x : robust_scratch_) x = std::abs(x - median);
    std::nth_element(robust_scratch_.begin(), mid, robust_scratch_.end());
    robust_spread = *mid;
  }
  const double views[kViews] = {value, level, spread, season, robust_spread};
  constexpr size_t kSeason = static_cast<size_t>(NoveltyView::season);
  constexpr size_t kRobust = static_cast<size_t>(NoveltyView::robust_spread);
  // The views this detector has, in NoveltyView's order (a tie goes to the first).
  const bool used[kViews] = {true, true, true, opt_.season_bins > 0, opt_.robust_spread_bins > 0};

  double score = 0;
  NoveltySpan here;
  here.first_bin = here.last_bin = bin;
  bool value_outside = false;
  constexpr size_t kSpread = static_cast<size_t>(NoveltyView::spread);
  if (spread_guard_ > 0) --spread_guard_;
  if (pushed_ >= warmup_len_) {
    for (size_t k = 0; k < kViews; ++k) {
      if (!used[k]) continue;
      if (spread_guard_ > 0 && (k == kSpread || k == kRobust)) continue;  // straddling a held shift's return
      // The season view is judged once its own range has as much history as the others had at their warm-up.
      if (k == kSeason && (!season_defined || season_pushed_ < opt_.warmup_bins)) continue;
      double lo = range_[k].low(), hi = range_[k].high();
      const double width_lo = lo, width_hi = hi;
      const auto slot = std::find(std::begin(kRememberedView), std::end(kRememberedView), k);
      if (repeat_len_ > 0 && slot != std::end(kRememberedView)) {
        SlidingRange& m = remembered_[slot - std::begin(kRememberedView)];
        m.expire(added_, repeat_len_);
        if (!m.empty()) {
          lo = std::min(lo, m.low());
          hi = std::max(hi, m.high());
        }
      }
      // The robust spread's width is at least robust_spread_floor of the value range's: a series flat but for its
      // spikes has a deviation range of almost no width.
      const double min_width =
          k == kRobust ? opt_.robust_spread_floor * (range_[0].high() - range_[0].low()) : 0.0;
      const double weight = k == kSeason ? opt_.season_weight : k == kRobust ? opt_.robust_spread_weight : 1.0;
      const double excess = excess_over(views[k], lo, hi, width_lo, width_hi, min_width) * weight;
      if (k == 0 && excess > opt_.threshold) value_outside = true;
      if (excess > score) {
        score = excess;
        here.score = excess;
        here.view = static_cast<NoveltyView>(k);
        here.value = views[k];
        here.range_low = lo;
        here.range_high = hi;
        here.above = views[k] > hi;
      }
    }
  }
  ++added_;
  const bool outside = score > opt_.threshold;
  // A finding is reported from a bin where it is outside and confirmed (confirm_median_bins).
  const bool confirmed =
      !confirm_ || score > opt_.confirm_alone_excess || confirming > opt_.confirm_excess;
  if (cooldown_ > 0) --cooldown_;
  // A noise finding's cool-down must not hide a real episode that follows it: a far larger excess opens anyway.
  const bool opens =
      outside && (cooldown_ == 0 || (score > opt_.cooldown_override_excess && score > last_score_));
  // A finding the range learns from ends where a departure from the learnt range opens a new one, at its bin: a
  // level shift held open as one finding hid a second, larger step (NAB's rds_cpu_utilization_e47b3b: a 17 -> 28
  // step reported 400 bins late).
  // Its return to the range it left ends it (held_shift_lasts_to_its_return), a departure then does not; nor does
  // the unreported departure it yielded to, if the value returns while that one is open: it was part of the shift.
  const bool lasts_to_return = opt_.held_shift_lasts_to_its_return;
  if (lasts_to_return && yielded_ && open_ && !learning_ && !reported_bin_ &&
      !(excess_over(value, yielded_->reference[0].first, yielded_->reference[0].second) > opt_.threshold)) {
    YieldedFinding held = std::move(*yielded_);
    yielded_.reset();
    give_back(std::move(held));
  }
  value_back_ = open_ && learning_ && !(excess_over(value, reference_[0].first, reference_[0].second) > opt_.threshold);
  if (open_ && learning_ && opens && opt_.new_departure_ends_held_finding && !(lasts_to_return && value_back_)) {
    std::optional<YieldedFinding> held;
    if (lasts_to_return) {
      held = YieldedFinding{*open_, reported_bin_, {reference_[0], reference_[1]}, held_, added_, false};
      if (last_value_bin_ && *last_value_bin_ >= held->span.first_bin) held->span.last_bin = *last_value_bin_;
    }
    const size_t listed = spans_.size();
    close();
    if (held) held->listed = spans_.size() > listed;
    yielded_ = held;
  }
  if (!open_) {
    if (opens) {
      open_ = here;
      open_->opened_bin = bin;
      reported_bin_.reset();
      if (confirmed) reported_bin_ = bin;
      last_score_ = score;
      cooldown_ = cooldown_len_;
      quiet_ = 0;
      held_ = 0;
      learning_ = false;
      last_value_bin_.reset();
      if (value_outside) last_value_bin_ = bin;
    }
  } else {
    // A finding lasts while a view is outside the range; once the range learns from it again, also while the value
    // or the level stays outside the range it left (a level shift is reported for as long as it lasts).
    bool value_out = value_outside, lasting = outside;
    if (learning_) {
      value_out = value_out || !value_back_;  // computed above against the same range, for this finding
      lasting = lasting || value_out || excess_over(level, reference_[1].first, reference_[1].second) > opt_.threshold;
    }
    if (lasting) {
      quiet_ = 0;
      open_->last_bin = bin;
      if (value_out) last_value_bin_ = bin;
      if (outside && confirmed && !reported_bin_) reported_bin_ = bin;
      if (outside && here.score > open_->score) {
        const size_t first = open_->first_bin, last = open_->last_bin;
        open_ = here;
        open_->first_bin = open_->opened_bin = first;
        open_->last_bin = last;
      }
    } else if (++quiet_ >= opt_.close_after_bins) {
      close();
    }
  }
  // The range learns from bins outside findings, and from a finding's bins once it outlasted learn_after_bins (a
  // range too young to hold a day's shape must not stay frozen); the finding itself goes on against the range it
  // left, until hold_bins(): then its level is the new normal.
  if (open_) {
    ++held_;
    if (!learning_ && held_ > std::min(opt_.learn_after_bins, hold_len_)) {
      learning_ = true;
      yielded_.reset();  // a departure held this long is a shift of its own
      for (size_t k = 0; k < 2; ++k) reference_[k] = {range_[k].low(), range_[k].high()};
      if (opt_.held_start_clipped_in_day_history && opt_.season_bins > 0) clip_held_start_in_day_history();
    }
    if (held_ > hold_len_) {
      open_->absorbed = true;
      close();
    }
  }
  // A finding's value, level and spreads are remembered once it closed (or the range learns from it): a repeat no
  // larger within repeat_memory_bins is not new.
  if (repeat_len_ > 0) {
    if (open_ && !learning_) {
      std::array<double, kRememberedViews> v{};
      for (size_t r = 0; r < kRememberedViews; ++r) v[r] = views[kRememberedView[r]];
      remember_pending_.push_back(v);
    } else if (!remember_pending_.empty()) {
      const bool spreads = !learning_ || opt_.remember_learnt_spreads;
      for (const auto& v : remember_pending_)
        for (size_t r = 0; r < kRememberedViews; ++r) {
          const size_t k = kRememberedView[r];
          if (used[k] && (spreads || (k != kSpread && k != kRobust))) remembered_[r].push(added_, v[r], repeat_len_);
        }
      remember_pending_.clear();
    }
  }
  // A short finding's day-view values join that view's range once it closed, clipped (season_learn_clip); each of
  // its bins counts as a bin of history for every view.
  const bool season_learns = opt_.season_bins > 0 && opt_.season_learn_clip >= 0;
  if (season_learns && open_ && !learning_)
    season_pending_.push_back(season_defined ? std::optional<double>(season) : std::nullopt);
  if (!open_ && !season_pending_.empty()) {
    SlidingRange& r = range_[kSeason];
    const bool bounded = !r.empty();
    const double lo = bounded ? r.low() : 0, hi = bounded ? r.high() : 0;
    const double reach = opt_.season_learn_clip * std::max(hi - lo, opt_.range_floor);
    for (const std::optional<double>& v : season_pending_) {
      if (v) r.push(pushed_, bounded ? std::clamp(*v, lo - reach, hi + reach) : *v, opt_.history_bins);
      ++pushed_;
    }
    season_pending_.clear();
  }
  if (!open_ || learning_) {
    season_pending_.clear();
    for (size_t k = 0; k < kViews; ++k)
      if (used[k] && (k != kSeason || season_defined)) range_[k].push(pushed_, views[k], opt_.history_bins);
    season_pushed_ += season_defined;
    ++pushed_;
  }
  return score;
}

double SeriesNoveltyDetector::excess_over(double v, double lo, double hi, double width_lo, double width_hi,
                                          double min_width) const {
  const double width = std::max({width_hi - width_lo, opt_.range_floor, min_width,
                                 1e-12 * std::max(std::abs(width_lo), std::abs(width_hi)), 1e-300});
  return std::min(kMaxExcess, std::max({v - hi, lo - v, 0.0}) / width);
}

std::deque<std::pair<size_t, double>>::iterator SeriesNoveltyDetector::bin_at_or_after(size_t bin) {
  return std::lower_bound(past_.begin(), past_.end(), bin,
                          [](const std::pair<size_t, double>& p, size_t b) { return p.first < b; });
}

void SeriesNoveltyDetector::replace_with_a_season_earlier(size_t from_bin) {
  for (auto it = bin_at_or_after(from_bin); it != past_.end(); ++it) {
    if (it->first < opt_.season_bins) continue;
    auto then = bin_at_or_after(it->first - opt_.season_bins);
    if (then != past_.end() && then->first == it->first - opt_.season_bins) it->second = then->second;
  }
}

void SeriesNoveltyDetector::clip_held_start_in_day_history() {
  const size_t settled = open_->first_bin + opt_.short_bins;
  auto it = bin_at_or_after(settled);
  if (it == past_.end()) return;
  const auto [lo, hi] = std::minmax_element(it, past_.end(), [](auto& a, auto& b) { return a.second < b.second; });
  const double low = lo->second, high = hi->second;
  for (auto p = bin_at_or_after(open_->first_bin); p != past_.end() && p->first < settled; ++p)
    p->second = std::clamp(p->second, low, high);
}

void SeriesNoveltyDetector::give_back(YieldedFinding&& held) {
  if (held.listed) spans_.pop_back();
  open_ = std::move(held.span);
  reported_bin_ = held.reported_bin;
  reference_[0] = held.reference[0];
  reference_[1] = held.reference[1];
  held_ = held.held + static_cast<size_t>(added_ - held.at);
  learning_ = true;
  last_value_bin_.reset();
  remember_pending_.clear();
}

void SeriesNoveltyDetector::close() {
  if (!open_) return;
  if (value_back_ && opt_.held_shift_lasts_to_its_return)
    spread_guard_ = std::max(opt_.short_bins, opt_.robust_spread_bins);
  // The held finding this one ended comes back where this one was never reported (noise within the shift).
  std::optional<YieldedFinding> held = std::move(yielded_);
  yielded_.reset();
  if (held && !reported_bin_ && !open_->absorbed && !learning_) {
    give_back(std::move(*held));
    return;
  }
  // A finding that outlasted the level view's bins is remembered for the season view as the bins a season before
  // it, so that a long episode does not come back as a ghost one season later (not one the range learnt from:
  // its level is in the baseline now). Short spikes are left: the level of a few bins barely carries them.
  if (opt_.season_bins > 0 && !learning_ && last_bin_ + 1 >= open_->first_bin + opt_.short_bins)
    replace_with_a_season_earlier(open_->first_bin);
  // The level and spread views trail a step's end by short_bins: where the value itself left the range, the
  // finding ends with the value's last bin outside.
  if (last_value_bin_ && *last_value_bin_ >= open_->first_bin) open_->last_bin = *last_value_bin_;
  // Reported from the bin it was confirmed at; never confirmed: not reported (its ranges and cool-down stand).
  if (!confirm_ || reported_bin_) {
    NoveltySpan span = *open_;
    span.opened_bin = span.first_bin;
    if (reported_bin_) {
      span.first_bin = *reported_bin_;
      span.last_bin = std::max(span.last_bin, span.first_bin);
    }
    spans_.push_back(span);
  }
  reported_bin_.reset();
  open_.reset();
  learning_ = false;
  last_value_bin_.reset();
}

void SeriesNoveltyDetector::finish() {
  yielded_.reset();
  close();
}

}  // namespace stackscope::analyze
