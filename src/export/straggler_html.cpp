#include "export/straggler_html.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace stackscope {

namespace {

std::string esc(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// White (0) to dark red (1).
std::string heat(double v) {
  v = std::clamp(std::isfinite(v) ? v : 0.0, 0.0, 1.0);
  const int r = static_cast<int>(255 - 75 * v), g = static_cast<int>(255 - 230 * v), b = static_cast<int>(255 - 230 * v);
  return fmt::format("rgb({},{},{})", r, g, b);
}

// A grid of coloured cells: rows x cols, values already scaled to [0, 1]; labels on the left.
std::string grid_svg(const std::vector<std::string>& row_labels, const std::vector<std::vector<double>>& scaled,
                     const std::vector<std::vector<std::string>>& tips, const std::string& x_caption, int cell_w,
                     int cell_h) {
  const int label_w = 110;
  const size_t cols = scaled.empty() ? 0 : scaled.front().size();
  const int w = label_w + static_cast<int>(cols) * cell_w + 10, h = static_cast<int>(row_labels.size()) * cell_h + 30;
  std::string s = fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif" font-size="10">)", w, h);
  for (size_t r = 0; r < row_labels.size(); ++r) {
    s += fmt::format(R"(<text x="{}" y="{}" text-anchor="end">{}</text>)", label_w - 4, r * cell_h + cell_h - 2,
                     esc(row_labels[r]));
    for (size_t c = 0; c < scaled[r].size(); ++c)
      s += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="{}"><title>{}</title></rect>)",
                       label_w + c * cell_w, r * cell_h, cell_w, cell_h, heat(scaled[r][c]), esc(tips[r][c]));
  }
  s += fmt::format(R"(<text x="{}" y="{}">{}</text></svg>)", label_w, h - 8, esc(x_caption));
  return s;
}

}  // namespace

std::string straggler_html(const analyze::StragglerReport& r, const std::string& title) {
  using namespace analyze;
  const auto& s1 = r.stage1;
  std::string h = fmt::format(R"(<!DOCTYPE html><html><head><meta charset="utf-8"><title>{}</title>
<style>body{{font-family:sans-serif;margin:20px;color:#222}} table{{border-collapse:collapse;font-size:12px}}
td,th{{border:1px solid #ccc;padding:3px 6px;text-align:left}} h2{{margin-top:28px}} .note{{color:#666;font-size:12px}}</style>
</head><body><h1>{}</h1>)",
                              esc(title), esc(title));
  // Verdict.
  if (!r.stragglers.empty()) {
    const int top = r.stragglers.front();
    h += fmt::format("<p><b>Straggler: {}</b> (stage-1 score {:.3f}", esc(r.workers[top]), s1.score[top]);
    if (!r.root_causes.empty())
      h += fmt::format("; root cause: {} <code>{}</code> on {})", esc(std::string(cause_kind_name(r.root_causes[0].kind))),
                       esc(r.root_causes[0].operation), esc(r.workers[r.root_causes[0].worker]));
    else
      h += ")";
    h += "</p>";
  }
  h += fmt::format(R"(<p class="note">{} workers, {} steps ({}), stage 2 uses {} z-scores.</p>)", r.workers.size(),
                   r.step_labels.size(), r.from_step_table ? "step-time table" : std::string(step_source_name(r.steps.source)),
                   r.stage2.robust ? "robust (median/MAD)" : "classical (mean/s.d.)");

  // Heatmap of S_A per worker and window.
  {
    std::vector<std::string> labels;
    std::vector<std::vector<double>> cells;
    std::vector<std::vector<std::string>> tips;
    double hi = 1e-9;
    for (auto& win : s1.windows)
      for (int w : s1.heatmap_workers) hi = std::max(hi, win.score[w]);
    for (int w : s1.heatmap_workers) {
      labels.push_back(r.workers[w]);
      std::vector<double> row;
      std::vector<std::string> tip;
      for (auto& win : s1.windows) {
        row.push_back(win.score[w] / hi);
        tip.push_back(fmt::format("{} steps {}-{}: S_A={:.3f}", r.workers[w], win.first_step, win.last_step, win.score[w]));
      }
      cells.push_back(row);
      tips.push_back(tip);
    }
    const int cw = std::clamp(900 / std::max<int>(1, s1.windows.size()), 4, 40);
    h += "<h2>Stage 1: abnormality S<sub>A</sub> per worker and window of steps</h2>";
    h += "<p class=\"note\">Mean Kolmogorov-Smirnov distance of each worker's execution rhythm to its peers; darker is more divergent.</p>";
    h += grid_svg(labels, cells, tips, "windows of steps (time) \u2192", cw, 12);
  }
  // Pairwise D matrix.
  if (s1.pairwise.rows() > 0) {
    std::vector<std::string> labels;
    std::vector<std::vector<double>> cells;
    std::vector<std::vector<std::string>> tips;
    for (Eigen::Index a = 0; a < s1.pairwise.rows(); ++a) {
      labels.push_back(r.workers[s1.heatmap_workers[a]]);
      std::vector<double> row;
      std::vector<std::string> tip;
      for (Eigen::Index b = 0; b < s1.pairwise.cols(); ++b) {
        row.push_back(s1.pairwise(a, b));
        tip.push_back(fmt::format("D({}, {}) = {:.3f}", r.workers[s1.heatmap_workers[a]], r.workers[s1.heatmap_workers[b]],
                                  s1.pairwise(a, b)));
      }
      cells.push_back(row);
      tips.push_back(tip);
    }
    h += "<h2>Stage 1: pairwise K-S distance D (whole run)</h2>";
    h += grid_svg(labels, cells, tips, "workers \u2192", 12, 12);
  }
  // Frequency timeline (Fig. 4).
  {
    std::vector<std::string> labels;
    std::vector<std::vector<double>> cells;
    std::vector<std::vector<std::string>> tips;
    if (!r.from_step_table && !r.timeline.counts.empty()) {
      uint32_t hi = 1;
      for (auto& row : r.timeline.counts)
        for (auto c : row) hi = std::max(hi, c);
      for (size_t k = 0; k < r.timeline.workers.size(); ++k) {
        labels.push_back(r.workers[r.timeline.workers[k]]);
        std::vector<double> row;
        std::vector<std::string> tip;
        for (size_t b = 0; b < r.timeline.counts[k].size(); ++b) {
          row.push_back(double(r.timeline.counts[k][b]) / hi);
          tip.push_back(fmt::format("{}: {} ops completed in [{:.1f}, {:.1f}) ms", labels.back(), r.timeline.counts[k][b],
                                    b * r.timeline.bin_ns / 1e6, (b + 1) * r.timeline.bin_ns / 1e6));
        }
        cells.push_back(row);
        tips.push_back(tip);
      }
      h += "<h2>Frequency timeline: operations completed per time bin</h2>";
      h += "<p class=\"note\">KAIR Fig. 4: regions where a worker's frequency is degraded or missing show where it falls behind (clock offsets removed).</p>";
      h += grid_svg(labels, cells, tips, fmt::format("time, {:.2f} ms per bin \u2192", r.timeline.bin_ns / 1e6), 4, 12);
    } else if (r.from_step_table && !r.step_times.empty()) {
      // Step time relative to the step's median across the shown workers: white = typical, red = 2x or more.
      const size_t steps = r.step_times.front().size();
      std::vector<double> med(steps, 0);
      for (size_t k = 0; k < steps; ++k) {
        std::vector<double> v;
        for (auto& row : r.step_times)
          if (k < row.size() && std::isfinite(row[k])) v.push_back(row[k]);
        if (!v.empty()) {
          std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
          med[k] = v[v.size() / 2];
        }
      }
      const size_t stride = std::max<size_t>(1, steps / 600);
      for (size_t k = 0; k < r.timeline.workers.size(); ++k) {
        labels.push_back(r.workers[r.timeline.workers[k]]);
        std::vector<double> row;
        std::vector<std::string> tip;
        for (size_t b = 0; b < steps; b += stride) {
          double worst = 0, val = NAN;
          for (size_t j = b; j < std::min(steps, b + stride); ++j)
            if (std::isfinite(r.step_times[k][j]) && med[j] > 0 && r.step_times[k][j] / med[j] - 1 >= worst) {
              worst = r.step_times[k][j] / med[j] - 1;
              val = r.step_times[k][j];
            }
          row.push_back(worst);
          tip.push_back(fmt::format("{} step {}: {:.1f}", labels.back(), r.step_labels[b], val));
        }
        cells.push_back(row);
        tips.push_back(tip);
      }
      h += "<h2>Step-time timeline</h2><p class=\"note\">Step time relative to the median worker of that step (white: typical, red: twice or more).</p>";
      h += grid_svg(labels, cells, tips, "steps \u2192", std::clamp(900 / std::max<int>(1, cells.empty() ? 1 : cells[0].size()), 1, 12), 12);
    }
  }
  // Stage 1 ranking.
  h += "<h2>Stage 1: workers by straggler score</h2><table><tr><th>worker</th><th>score</th><th>S<sub>A</sub> whole run</th><th>persistent</th><th>episodic</th><th>episode steps</th></tr>";
  for (size_t k = 0; k < s1.ranking.size() && k < 20; ++k) {
    const int w = s1.ranking[k];
    std::string ep = s1.episode_window[w] >= 0 ? fmt::format("{}-{}", s1.windows[s1.episode_window[w]].first_step,
                                                             s1.windows[s1.episode_window[w]].last_step)
                                               : "";
    h += fmt::format("<tr><td>{}</td><td>{:.3f}</td><td>{:.3f}</td><td>{:.3f}</td><td>{:.3f}</td><td>{}</td></tr>",
                     esc(r.workers[w]), s1.score[w], s1.whole_run[w], s1.persistent[w], s1.episodic[w], ep);
  }
  h += "</table>";
  if (!r.from_step_table) {
    h += "<h2>Stage 3: root causes</h2><table><tr><th>#</th><th>kind</th><th>worker</th><th>operation / edge</th><th>steps</th><th>evidence</th></tr>";
    for (size_t k = 0; k < r.root_causes.size(); ++k) {
      const auto& rc = r.root_causes[k];
      std::string steps;
      for (size_t j = 0; j < rc.steps.size() && j < 12; ++j) steps += (j ? "," : "") + std::to_string(rc.steps[j]);
      if (rc.steps.size() > 12) steps += ",...";
      h += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td></tr>", k + 1,
                       esc(std::string(cause_kind_name(rc.kind))), esc(r.workers[rc.worker]), esc(rc.operation), steps,
                       esc(rc.evidence));
    }
    h += "</table>";
    h += "<h2>Stage 2: flagged operations (a &gt; 3)</h2><table><tr><th>worker</th><th>operation</th><th>step</th><th>a</th><th>z start</th><th>z duration</th><th>duration ms</th><th>expected ms</th></tr>";
    for (size_t k = 0; k < r.flagged.size() && k < 40; ++k) {
      const auto& f = r.flagged[k];
      h += fmt::format("<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td>{:.1f}</td><td>{:.1f}</td><td>{:.1f}</td><td>{:.3f}</td><td>{:.3f}</td></tr>",
                       esc(r.workers[f.worker]), esc(f.name), f.step, f.a, f.z_start, f.z_duration, f.duration_ns / 1e6,
                       f.expected_duration_ns / 1e6);
    }
    h += "</table>";
  }
  h += "</body></html>\n";
  return h;
}

}  // namespace stackscope
