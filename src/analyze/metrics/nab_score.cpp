#include "analyze/metrics/nab_score.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>

namespace stackscope::analyze {

double nab_scaled_sigmoid(double x) {
  if (x >= 3.0) return -1.0;  // a false positive far behind any window
  return 2.0 / (1.0 + std::exp(5.0 * x)) - 1.0;
}

NabFileScoring nab_prepare(size_t rows, const std::vector<NabWindow>& windows_in, const NabProfile& profile,
                           double probation_percent) {
  std::vector<NabWindow> windows = windows_in;
  std::sort(windows.begin(), windows.end(), [](const NabWindow& a, const NabWindow& b) { return a.first < b.first; });
  for (const NabWindow& w : windows)
    if (w.last < w.first || w.last >= rows) throw std::invalid_argument("NAB window outside the file's rows");
  NabFileScoring out;
  out.sweep_score.assign(rows, 0.0);
  out.window_of.assign(rows, -1);
  const double max_tp = nab_scaled_sigmoid(-1.0);
  const double probation =
      std::min(std::floor(probation_percent * static_cast<double>(rows)), probation_percent * 5000.0);
  size_t next = 0;
  int cur = -1;
  bool have_prev = false;
  size_t prev_right = 0;
  double prev_width = 0;
  std::vector<uint8_t> window_scored(windows.size(), 0);
  for (size_t i = 0; i < rows; ++i) {
    if (cur < 0 && next < windows.size() && windows[next].first == i) cur = static_cast<int>(next++);
    double weighted;
    if (cur >= 0) {
      const NabWindow& w = windows[static_cast<size_t>(cur)];
      const double width = static_cast<double>(w.last - w.first + 1);
      const double pos = -(static_cast<double>(w.last) - static_cast<double>(i) + 1.0) / width;
      weighted = nab_scaled_sigmoid(pos) * profile.tp_weight / max_tp;
    } else {
      const double past = have_prev ? std::abs(static_cast<double>(prev_right) - static_cast<double>(i)) /
                                          std::max(prev_width - 1.0, 1.0)
                                    : 3.0;
      weighted = nab_scaled_sigmoid(past) * profile.fp_weight;
    }
    out.sweep_score[i] = weighted;
    if (static_cast<double>(i) < probation) {
      out.window_of[i] = -2;
    } else {
      out.window_of[i] = cur;
      if (cur >= 0) window_scored[static_cast<size_t>(cur)] = 1;
    }
    if (cur >= 0 && windows[static_cast<size_t>(cur)].last == i) {
      have_prev = true;
      prev_right = i;
      prev_width = static_cast<double>(windows[static_cast<size_t>(cur)].last - windows[static_cast<size_t>(cur)].first + 1);
      cur = -1;
    }
  }
  out.scored_windows = static_cast<size_t>(std::count(window_scored.begin(), window_scored.end(), 1));
  // Renumber so that only scored windows count (a window wholly in probation is not a miss).
  return out;
}

NabRawScore nab_score_file(const NabFileScoring& p, std::span<const uint8_t> detected, const NabProfile& profile) {
  if (detected.size() != p.sweep_score.size()) throw std::invalid_argument("NAB: detections and rows differ in length");
  NabRawScore r;
  std::vector<double> best;  // per window index: best TP score, or -A_FN when missed
  int max_window = -1;
  for (int w : p.window_of) max_window = std::max(max_window, w);
  std::vector<uint8_t> seen(static_cast<size_t>(max_window + 1), 0);
  for (int w : p.window_of)
    if (w >= 0) seen[static_cast<size_t>(w)] = 1;
  best.assign(seen.size(), -profile.fn_weight);
  std::vector<uint8_t> hit(seen.size(), 0);
  double fp_sum = 0;
  for (size_t i = 0; i < detected.size(); ++i) {
    const int w = p.window_of[i];
    if (w == -2) continue;
    if (detected[i]) {
      if (w >= 0) {
        ++r.tp;
        if (!hit[static_cast<size_t>(w)]) best[static_cast<size_t>(w)] = p.sweep_score[i];
        else best[static_cast<size_t>(w)] = std::max(best[static_cast<size_t>(w)], p.sweep_score[i]);
        hit[static_cast<size_t>(w)] = 1;
      } else {
        ++r.fp;
        fp_sum += p.sweep_score[i];
      }
    } else {
      if (w >= 0) ++r.fn; else ++r.tn;
    }
  }
  r.score = fp_sum;
  for (size_t w = 0; w < seen.size(); ++w) {
    if (!seen[w]) continue;
    ++r.windows;
    if (hit[w]) ++r.windows_detected;
    r.score += best[w];
  }
  return r;
}

double nab_normalized(double raw_total, size_t total_windows, const NabProfile& profile, size_t label_windows) {
  const double null_score = -profile.fn_weight * static_cast<double>(total_windows);
  const double perfect = profile.tp_weight * static_cast<double>(label_windows ? label_windows : total_windows);
  if (perfect == null_score) return 0.0;
  return 100.0 * (raw_total - null_score) / (perfect - null_score);
}

NabThreshold nab_best_threshold(std::span<const NabFileScoring> files, std::span<const std::vector<double>> scores,
                                const NabProfile& profile) {
  if (files.size() != scores.size()) throw std::invalid_argument("NAB: scores for a different number of files");
  struct Row {
    double score;
    uint32_t file;
    int window;  // -1: outside every window
    double sweep;
  };
  std::vector<Row> rows;
  std::vector<size_t> window_base(files.size() + 1, 0);  // global window index = base[file] + window
  for (size_t f = 0; f < files.size(); ++f) {
    const NabFileScoring& p = files[f];
    if (scores[f].size() != p.sweep_score.size()) throw std::invalid_argument("NAB: scores and rows differ in length");
    int max_window = -1;
    for (size_t i = 0; i < p.window_of.size(); ++i) {
      if (p.window_of[i] == -2) continue;
      max_window = std::max(max_window, p.window_of[i]);
      rows.push_back({scores[f][i], static_cast<uint32_t>(f), p.window_of[i], p.sweep_score[i]});
    }
    window_base[f + 1] = window_base[f] + static_cast<size_t>(max_window + 1);
  }
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.score > b.score; });
  // Every scored window starts as a miss; the total moves as rows are switched on from the highest score down.
  std::vector<double> best(window_base.back(), -profile.fn_weight);
  std::vector<uint8_t> scored(window_base.back(), 0);
  for (const Row& r : rows)
    if (r.window >= 0) scored[window_base[r.file] + static_cast<size_t>(r.window)] = 1;
  double total = 0;
  for (size_t w = 0; w < best.size(); ++w)
    if (scored[w]) total += best[w];
  NabThreshold out{std::numeric_limits<double>::infinity(), total};  // nothing detected
  for (size_t i = 0; i < rows.size();) {
    const double thr = rows[i].score;
    for (; i < rows.size() && rows[i].score == thr; ++i) {
      const Row& r = rows[i];
      if (r.window < 0) {
        total += r.sweep;
      } else {
        double& b = best[window_base[r.file] + static_cast<size_t>(r.window)];
        if (r.sweep > b) {
          total += r.sweep - b;
          b = r.sweep;
        }
      }
    }
    if (total > out.raw) out = {thr, total};
  }
  return out;
}

}  // namespace stackscope::analyze
