#include "export/straggler_html.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "export/svg_plot.h"

namespace stackscope {

namespace {

using svg::escape;

// The rank in a worker's name ("host:rank3", "rank3"), or -1.
int rank_of(const std::string& worker) {
  const auto at = worker.rfind("rank");
  if (at == std::string::npos) return -1;
  try {
    size_t used = 0;
    const int r = std::stoi(worker.substr(at + 4), &used);
    return used == worker.size() - at - 4 ? r : -1;
  } catch (const std::exception&) {
    return -1;
  }
}

// Workers ordered by rank (those without a rank after, by name), so that rows read rank 0, 1, 2, ... 10.
std::vector<int> by_rank(std::vector<int> workers, const std::vector<std::string>& names) {
  std::stable_sort(workers.begin(), workers.end(), [&](int a, int b) {
    const int ra = rank_of(names[a]), rb = rank_of(names[b]);
    if ((ra < 0) != (rb < 0)) return rb < 0;
    if (ra != rb) return ra < rb;
    return names[a] < names[b];
  });
  return workers;
}

// The names of `workers` (indices into `all`), in the same order.
std::vector<std::string> names_of(const std::vector<int>& workers, const std::vector<std::string>& all) {
  std::vector<std::string> names;
  names.reserve(workers.size());
  for (int w : workers) names.push_back(all[w]);
  return names;
}

// Positions 0..n-1 into `names`, ordered by rank as by_rank does: the order of a grid's rows.
std::vector<int> rank_order(const std::vector<std::string>& names) {
  std::vector<int> positions(names.size());
  std::iota(positions.begin(), positions.end(), 0);
  return by_rank(std::move(positions), names);
}

struct Grid {
  std::vector<std::string> row_labels;
  std::vector<bool> row_marked;                       // the straggler: label in bold red
  std::vector<std::vector<double>> scaled;            // [row][col] in [0, 1]
  std::vector<std::vector<std::string>> tips;
  std::vector<std::pair<size_t, std::string>> x_ticks;  // column index, label
  std::vector<std::string> column_labels;             // a label per column (matrices), rotated
  std::string x_caption;
  int cell_w = 8, cell_h = 12;
  // Colour scale: what 0 and 1 of `scaled` stand for, in the heatmap's units.
  double scale_lo = 0, scale_hi = 1;
  std::string scale_caption;
};

// A grid of coloured cells with its row labels, x ticks (or column labels) and its colour scale beneath.
std::string grid_svg(const Grid& g) {
  size_t longest = 0;
  for (const auto& l : g.row_labels) longest = std::max(longest, l.size());
  const int label_w = std::clamp(static_cast<int>(longest) * 6 + 10, 60, 220);
  const size_t cols = g.scaled.empty() ? 0 : g.scaled.front().size();
  size_t longest_col = 0;
  for (const auto& l : g.column_labels) longest_col = std::max(longest_col, l.size());
  const int top = g.column_labels.empty() ? 4 : std::min(160, static_cast<int>(longest_col) * 6 + 10);
  const int grid_h = static_cast<int>(g.row_labels.size()) * g.cell_h;
  const int w = label_w + static_cast<int>(cols) * g.cell_w + 20, h = top + grid_h + 34;
  std::string s = fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" class="heatmap" width="{}" height="{}" font-family="sans-serif" font-size="10">)",
                              std::max(w, 300), h);
  for (size_t c = 0; c < g.column_labels.size() && c < cols; ++c)
    s += fmt::format(R"~(<text transform="translate({},{}) rotate(-60)" class="collabel">{}</text>)~",
                     label_w + static_cast<int>(c) * g.cell_w + g.cell_w / 2 + 3, top - 3, escape(g.column_labels[c]));
  // The grid's frame: white cells (value 0) stay visible as cells.
  s += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#bbb"/>)", label_w - 0.5, top - 0.5,
                   static_cast<int>(cols) * g.cell_w + 1, grid_h + 1);
  for (size_t r = 0; r < g.row_labels.size(); ++r) {
    const bool marked = r < g.row_marked.size() && g.row_marked[r];
    s += fmt::format(R"(<text class="rowlabel" x="{}" y="{}" text-anchor="end"{}>{}</text>)", label_w - 4,
                     top + static_cast<int>(r) * g.cell_h + g.cell_h - 2,
                     marked ? R"( font-weight="bold" fill="#b42318")" : "", escape(g.row_labels[r]));
    for (size_t c = 0; c < g.scaled[r].size(); ++c)
      s += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="{}"><title>{}</title></rect>)",
                       label_w + static_cast<int>(c) * g.cell_w, top + static_cast<int>(r) * g.cell_h, g.cell_w, g.cell_h,
                       svg::heat_colour(g.scaled[r][c]), escape(g.tips[r][c]));
  }
  const int axis_y = top + grid_h;
  for (const auto& [c, label] : g.x_ticks) {
    const int x = label_w + static_cast<int>(c) * g.cell_w + g.cell_w / 2;
    s += fmt::format(R"(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#666"/><text class="xtick" x="{}" y="{}" text-anchor="middle">{}</text>)",
                     x, axis_y, x, axis_y + 4, x, axis_y + 14, escape(label));
  }
  s += fmt::format(R"(<text x="{}" y="{}" fill="#444">{}</text></svg>)", label_w, h - 4, escape(g.x_caption));
  s += svg::colour_scale(g.scale_lo, g.scale_hi, g.scale_caption);
  return s;
}

// About `target` evenly spaced tick columns out of `n`, labelled by `label(column)`.
template <class F>
std::vector<std::pair<size_t, std::string>> ticks_every(size_t n, size_t target, F label) {
  std::vector<std::pair<size_t, std::string>> out;
  if (n == 0) return out;
  const size_t step = std::max<size_t>(1, (n + target - 1) / target);
  for (size_t c = 0; c < n; c += step) out.emplace_back(c, label(c));
  return out;
}

}  // namespace

std::string straggler_html_body(const analyze::StragglerReport& r) {
  using namespace analyze;
  const auto& s1 = r.stage1;
  const int straggler = r.stragglers.empty() ? -1 : r.stragglers.front();
  std::string h;
  // Verdict.
  if (straggler >= 0) {
    h += fmt::format("<p class=\"verdict\"><b>Straggler: {}</b> (stage-1 score {:.3f}", escape(r.workers[straggler]),
                     s1.score[straggler]);
    if (!r.root_causes.empty())
      h += fmt::format("; root cause: {} <code>{}</code> on {})", escape(std::string(cause_kind_name(r.root_causes[0].kind))),
                       escape(r.root_causes[0].operation), escape(r.workers[r.root_causes[0].worker]));
    else
      h += ")";
    h += "</p>";
  }
  h += fmt::format(R"(<p class="note">{} workers, {} steps ({}), stage 2 uses {} z-scores. Rows are workers by rank; the straggler's name is in red.</p>)",
                   r.workers.size(), r.step_labels.size(),
                   r.from_step_table ? "step-time table" : std::string(step_source_name(r.steps.source)),
                   r.stage2.robust ? "robust (median/MAD)" : "classical (mean/s.d.)");

  // Heatmap of S_A per worker and window.
  if (!s1.windows.empty()) {
    Grid g;
    double hi = 1e-9;
    for (auto& win : s1.windows)
      for (int w : s1.heatmap_workers) hi = std::max(hi, win.score[w]);
    for (int w : by_rank(s1.heatmap_workers, r.workers)) {
      g.row_labels.push_back(r.workers[w]);
      g.row_marked.push_back(w == straggler);
      std::vector<double> row;
      std::vector<std::string> tip;
      for (auto& win : s1.windows) {
        row.push_back(win.score[w] / hi);
        tip.push_back(fmt::format("{} steps {}-{}: S_A={:.3f}", r.workers[w], win.first_step, win.last_step, win.score[w]));
      }
      g.scaled.push_back(row);
      g.tips.push_back(tip);
    }
    g.cell_w = std::clamp(900 / std::max<int>(1, static_cast<int>(s1.windows.size())), 4, 40);
    g.x_ticks = ticks_every(s1.windows.size(), 10, [&](size_t c) { return std::to_string(s1.windows[c].first_step); });
    g.x_caption = "first step of each window \u2192";
    g.scale_hi = hi;
    g.scale_caption = "S_A: mean K-S distance to peers (0: same rhythm)";
    h += "<h3>Stage 1: abnormality S<sub>A</sub> per worker and window of steps</h3>";
    h += "<p class=\"note\">Mean Kolmogorov-Smirnov distance of each worker's execution rhythm to its peers; darker is more divergent.</p>";
    h += grid_svg(g);
  }
  // Pairwise D matrix, rows and columns by rank.
  if (s1.pairwise.rows() > 0) {
    Grid g;
    std::vector<int> idx(static_cast<size_t>(s1.pairwise.rows()));
    for (size_t k = 0; k < idx.size(); ++k) idx[k] = static_cast<int>(k);
    const std::vector<std::string> names = names_of(s1.heatmap_workers, r.workers);
    idx = by_rank(idx, names);
    for (int a : idx) {
      g.row_labels.push_back(names[a]);
      g.column_labels.push_back(names[a]);
      g.row_marked.push_back(s1.heatmap_workers[a] == straggler);
      std::vector<double> row;
      std::vector<std::string> tip;
      for (int b : idx) {
        row.push_back(s1.pairwise(a, b));
        tip.push_back(fmt::format("D({}, {}) = {:.3f}", names[a], names[b], s1.pairwise(a, b)));
      }
      g.scaled.push_back(row);
      g.tips.push_back(tip);
    }
    g.cell_w = g.cell_h = 14;
    g.x_caption = "workers (same order as the rows)";
    g.scale_caption = "D: K-S distance between two workers' rhythms (0: identical, 1: disjoint)";
    h += "<h3>Stage 1: pairwise K-S distance D (whole run)</h3>";
    h += grid_svg(g);
  }
  // Frequency timeline (Fig. 4).
  if (!r.from_step_table && !r.timeline.counts.empty()) {
    Grid g;
    uint32_t hi = 1;
    for (auto& row : r.timeline.counts)
      for (auto c : row) hi = std::max(hi, c);
    const std::vector<std::string> names = names_of(r.timeline.workers, r.workers);
    for (int k : rank_order(names)) {
      g.row_labels.push_back(names[k]);
      g.row_marked.push_back(r.timeline.workers[k] == straggler);
      std::vector<double> row;
      std::vector<std::string> tip;
      for (size_t b = 0; b < r.timeline.counts[k].size(); ++b) {
        row.push_back(double(r.timeline.counts[k][b]) / hi);
        tip.push_back(fmt::format("{}: {} ops completed in [{:.1f}, {:.1f}) ms", names[k], r.timeline.counts[k][b],
                                  b * r.timeline.bin_ns / 1e6, (b + 1) * r.timeline.bin_ns / 1e6));
      }
      g.scaled.push_back(row);
      g.tips.push_back(tip);
    }
    const size_t bins = g.scaled.empty() ? 0 : g.scaled.front().size();
    g.cell_w = 4;
    // Round times (0, 0.5, 1, 1.5 s...) at the columns they fall in.
    const double bin_s = static_cast<double>(r.timeline.bin_ns) * 1e-9;
    if (bin_s > 0)
      for (double t : svg::nice_ticks(0, static_cast<double>(bins) * bin_s, 8))
        if (t >= 0 && t / bin_s < static_cast<double>(bins))
          g.x_ticks.emplace_back(static_cast<size_t>(t / bin_s), svg::tick_label(t) + " s");
    g.x_caption = fmt::format("time since the first operation ({:.2f} ms per bin) \u2192", r.timeline.bin_ns / 1e6);
    g.scale_hi = hi;
    g.scale_caption = "operations completed per bin";
    h += "<h3>Frequency timeline: operations completed per time bin</h3>";
    h += "<p class=\"note\">KAIR Fig. 4: regions where a worker's frequency is degraded or missing show where it falls behind (clock offsets removed).</p>";
    h += grid_svg(g);
  } else if (r.from_step_table && !r.step_times.empty()) {
    // Step time relative to the step's median across the shown workers: white = typical, red = 2x or more.
    Grid g;
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
    const std::vector<std::string> names = names_of(r.timeline.workers, r.workers);
    for (int k : rank_order(names)) {
      g.row_labels.push_back(names[k]);
      g.row_marked.push_back(r.timeline.workers[k] == straggler);
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
        tip.push_back(fmt::format("{} step {}: {:.1f}", names[k], r.step_labels[b], val));
      }
      g.scaled.push_back(row);
      g.tips.push_back(tip);
    }
    const size_t cols = g.scaled.empty() ? 0 : g.scaled.front().size();
    g.cell_w = std::clamp(900 / std::max<int>(1, static_cast<int>(cols)), 1, 12);
    g.x_ticks = ticks_every(cols, 10, [&](size_t c) { return std::to_string(r.step_labels[c * stride]); });
    g.x_caption = "step \u2192";
    g.scale_caption = "step time over the step's median worker, minus 1 (1: twice as long or more)";
    h += "<h3>Step-time timeline</h3><p class=\"note\">Step time relative to the median worker of that step (white: typical, red: twice or more).</p>";
    h += grid_svg(g);
  }
  // Stage 1 ranking.
  h += "<h3>Stage 1: workers by straggler score</h3><table><tr><th>worker</th><th>score</th><th>S<sub>A</sub> whole run</th><th>persistent</th><th>episodic</th><th>episode steps</th></tr>";
  for (size_t k = 0; k < s1.ranking.size() && k < 20; ++k) {
    const int w = s1.ranking[k];
    std::string ep = s1.episode_window[w] >= 0 ? fmt::format("{}-{}", s1.windows[s1.episode_window[w]].first_step,
                                                             s1.windows[s1.episode_window[w]].last_step)
                                               : "";
    h += fmt::format("<tr><td>{}</td><td>{:.3f}</td><td>{:.3f}</td><td>{:.3f}</td><td>{:.3f}</td><td>{}</td></tr>",
                     escape(r.workers[w]), s1.score[w], s1.whole_run[w], s1.persistent[w], s1.episodic[w], ep);
  }
  h += "</table>";
  if (!r.from_step_table) {
    h += "<h3>Stage 3: root causes</h3><table><tr><th>#</th><th>kind</th><th>worker</th><th>operation / edge</th><th>steps</th><th>evidence</th></tr>";
    for (size_t k = 0; k < r.root_causes.size(); ++k) {
      const auto& rc = r.root_causes[k];
      std::string steps;
      for (size_t j = 0; j < rc.steps.size() && j < 12; ++j) steps += (j ? "," : "") + std::to_string(rc.steps[j]);
      if (rc.steps.size() > 12) steps += ",...";
      h += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td></tr>", k + 1,
                       escape(std::string(cause_kind_name(rc.kind))), escape(r.workers[rc.worker]), escape(rc.operation),
                       steps, escape(rc.evidence));
    }
    h += "</table>";
    h += "<h3>Stage 2: flagged operations (a &gt; 3)</h3><table><tr><th>worker</th><th>operation</th><th>step</th><th>a</th><th>z start</th><th>z duration</th><th>duration ms</th><th>expected ms</th></tr>";
    for (size_t k = 0; k < r.flagged.size() && k < 40; ++k) {
      const auto& f = r.flagged[k];
      h += fmt::format("<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td>{:.1f}</td><td>{:.1f}</td><td>{:.1f}</td><td>{:.3f}</td><td>{:.3f}</td></tr>",
                       escape(r.workers[f.worker]), escape(f.name), f.step, f.a, f.z_start, f.z_duration,
                       f.duration_ns / 1e6, f.expected_duration_ns / 1e6);
    }
    h += "</table>";
  }
  return h;
}

std::string straggler_html(const analyze::StragglerReport& r, const std::string& title) {
  return fmt::format(R"(<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{}</title>
<style>body{{font-family:sans-serif;margin:20px;color:#222}} table{{border-collapse:collapse;font-size:12px}}
td,th{{border:1px solid #ccc;padding:3px 6px;text-align:left}} h3{{margin-top:28px}} .note{{color:#666;font-size:12px}}
svg{{display:block;margin:4px 0}}</style>
</head><body><h1>{}</h1>{}</body></html>
)",
                     escape(title), escape(title), straggler_html_body(r));
}

}  // namespace stackscope
