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
  last_bin_ = bin;
  if (opt_.season_bins > 0) {
    past_.emplace_back(bin, value);
    const size_t keep = opt_.season_bins + opt_.short_bins + opt_.max_hold_bins + opt_.close_after_bins;
    while (past_.front().first + keep < bin) past_.pop_front();
    if (bin + 1 >= opt_.season_bins + opt_.short_bins) {
      // The level view's bins one season earlier.
      const size_t hi = bin - opt_.season_bins, lo = hi + 1 - opt_.short_bins;
      double then = 0;
      size_t m = 0;
      for (auto it = bin_at_or_after(lo); it != past_.end() && it->first <= hi; ++it, ++m) then += it->second;
      if (m > 0) season = level - then / static_cast<double>(m);
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

std::deque<std::pair<size_t, double>>::iterator SeriesNoveltyDetector::bin_at_or_after(size_t bin) {
  return std::lower_bound(past_.begin(), past_.end(), bin,
                          [](const std::pair<size_t, double>& p, size_t b) { return p.first < b; });
}

void SeriesNoveltyDetector::close() {
  if (!open_) return;
  // A finding that outlasted the level view's bins is remembered for the season view as the bins a season before
  // it, so that a long episode does not come back as a ghost one season later (not one taken as the new normal:
  // its level is the baseline now). Short spikes are left: the level of a few bins barely carries them.
  if (opt_.season_bins > 0 && !open_->absorbed && last_bin_ + 1 >= open_->first_bin + opt_.short_bins) {
    for (auto it = bin_at_or_after(open_->first_bin); it != past_.end(); ++it) {
      if (it->first < opt_.season_bins) continue;
      auto then = bin_at_or_after(it->first - opt_.season_bins);
      if (then != past_.end() && then->first == it->first - opt_.season_bins) it->second = then->second;
    }
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
