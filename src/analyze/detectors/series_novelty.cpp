#include "analyze/detectors/series_novelty.h"

#include <algorithm>
#include <cmath>
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
  }
  return "value";
}

std::string novelty_view_description(NoveltyView v, size_t short_bins) {
  switch (v) {
    case NoveltyView::value: return "value";
    case NoveltyView::level: return "level (mean of the last " + std::to_string(short_bins) + " bins)";
    case NoveltyView::spread: return "spread (of the last " + std::to_string(short_bins) + " bins)";
    case NoveltyView::season: return "level's change from a day earlier";
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

SeriesNoveltyDetector::SeriesNoveltyDetector(SeriesNoveltyOptions options) : opt_(options) {
  if (!(opt_.threshold >= 0) || opt_.history_bins == 0 || opt_.short_bins == 0 || opt_.close_after_bins == 0)
    throw std::invalid_argument("series novelty: need threshold >= 0 and history, short and close-after bins > 0");
}

double SeriesNoveltyDetector::add(size_t bin, double value) {
  if (!std::isfinite(value)) return 0;
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
  // Season view: this level minus the level of the same bins one season earlier (0 until a season has passed).
  double season = 0;
  ++arrivals_;
  if (opt_.season_bins > 0) {
    past_.push_back(value);
    // Long enough to rewrite a whole finding (close())
    const size_t keep = opt_.season_bins + opt_.short_bins + opt_.max_hold_bins + opt_.close_after_bins;
    if (past_.size() > keep) past_.pop_front();
    if (past_.size() >= opt_.season_bins + recent_.size()) {
      double then = 0;
      const size_t end = past_.size() - opt_.season_bins;  // one past the bin a season ago
      for (size_t k = end - recent_.size(); k < end; ++k) then += past_[k];
      season = level - then / n;
    }
  }
  const double views[kViews] = {value, level, spread, season};
  const size_t used_views = opt_.season_bins > 0 ? kViews : kViews - 1;

  double score = 0;
  NoveltySpan here;
  here.first_bin = here.last_bin = bin;
  bool value_outside = false;
  if (pushed_ >= opt_.warmup_bins) {
    for (size_t k = 0; k < used_views; ++k) {
      const double lo = range_[k].low(), hi = range_[k].high();
      const double width = std::max({hi - lo, opt_.range_floor, 1e-12 * std::max(std::abs(lo), std::abs(hi)), 1e-300});
      const double excess = std::max({views[k] - hi, lo - views[k], 0.0}) / width *
                            (k == static_cast<size_t>(NoveltyView::season) ? opt_.season_weight : 1.0);
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
  const bool outside = score > opt_.threshold;
  if (cooldown_ > 0) --cooldown_;
  if (!open_) {
    // A noise finding's cool-down must not hide a real episode that follows it: a far larger excess opens anyway.
    const bool overrides = score > opt_.cooldown_override * opt_.threshold && score > last_score_;
    if (outside && (cooldown_ == 0 || overrides)) {
      open_ = here;
      open_arrival_ = arrivals_ - 1;
      last_score_ = score;
      cooldown_ = opt_.cooldown_bins;
      quiet_ = 0;
      held_ = 0;
      last_value_bin_.reset();
      if (value_outside) last_value_bin_ = bin;
    }
  } else if (outside) {
    quiet_ = 0;
    open_->last_bin = bin;
    if (value_outside) last_value_bin_ = bin;
    if (here.score > open_->score) {
      const size_t first = open_->first_bin, last = open_->last_bin;
      open_ = here;
      open_->first_bin = first;
      open_->last_bin = last;
    }
  } else if (++quiet_ >= opt_.close_after_bins) {
    close();
  }
  // The range learns from bins outside findings, and from a finding's bins once it outlasted max_hold_bins.
  if (open_ && ++held_ > opt_.max_hold_bins) {
    open_->absorbed = true;
    close();
  }
  if (!open_ || open_->absorbed) {
    for (size_t k = 0; k < used_views; ++k) range_[k].push(pushed_, views[k], opt_.history_bins);
    ++pushed_;
  }
  return score;
}

void SeriesNoveltyDetector::close() {
  if (!open_) return;
  // A finding that outlasted the level view's bins is remembered for the season view as the bins a season before
  // it, so that a long episode does not come back as a ghost one season later (not one taken as the new normal:
  // its level is the baseline now). Short spikes are left: the level
  // of a few bins barely carries them.
  const uint64_t open_bins = arrivals_ - open_arrival_;
  if (opt_.season_bins > 0 && !open_->absorbed && open_bins >= opt_.short_bins && past_.size() > opt_.season_bins) {
    const size_t kept = static_cast<size_t>(std::min<uint64_t>(open_bins, past_.size() - opt_.season_bins));
    for (size_t i = past_.size() - kept; i < past_.size(); ++i) past_[i] = past_[i - opt_.season_bins];
  }
  // The level and spread views trail a step's end by short_bins: where the value itself left the range, the
  // finding ends with the value's last bin outside.
  if (last_value_bin_ && *last_value_bin_ >= open_->first_bin) open_->last_bin = *last_value_bin_;
  spans_.push_back(*open_);
  open_.reset();
  last_value_bin_.reset();
}

void SeriesNoveltyDetector::finish() { close(); }

}  // namespace stackscope::analyze
