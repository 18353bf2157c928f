#include "export/svg_plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace stackscope::svg {

namespace {
// Colour-blind-safe palette (Okabe-Ito, without the yellow that vanishes on white).
const char* const kPalette[] = {"#0072b2", "#d55e00", "#009e73", "#cc79a7", "#56b4e9", "#e69f00", "#000000"};

constexpr int kLeft = 64, kRight = 16, kTop = 44, kBottom = 40;  // title, then the legend's row, then the plot

bool finite(double v) { return std::isfinite(v); }
}  // namespace

std::string escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!finite(lo) || !finite(hi)) return {};
  if (hi < lo) std::swap(lo, hi);
  if (hi - lo < 1e-300) {
    const double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10, std::floor(std::log10(raw)));
  // The 1-2-5 step nearest the raw step (in ratio), so that the count stays near `target`.
  double step = mag;
  for (double m : {2.0, 5.0, 10.0})
    if (std::abs(std::log(m * mag / raw)) < std::abs(std::log(step / raw))) step = m * mag;
  std::vector<double> out;
  for (double t = std::ceil(lo / step - 1e-9) * step; t <= hi + step * 1e-9; t += step)
    out.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
  return out;
}

std::string tick_label(double v) {
  const double a = std::abs(v);
  if (a == 0) return "0";
  if (a >= 1e9) return fmt::format("{:g}G", v / 1e9);
  if (a >= 1e6) return fmt::format("{:g}M", v / 1e6);
  if (a >= 1e4) return fmt::format("{:g}k", v / 1e3);
  if (a < 1e-3) return fmt::format("{:.1e}", v);
  return fmt::format("{:.4g}", v);
}

AxisUnit readable_unit(const std::string& unit, double max_abs) {
  if (!finite(max_abs)) max_abs = 0;
  if (unit == "bytes") {
    if (max_abs >= 1 << 30) return {double(1 << 30), "GiB"};
    if (max_abs >= 1 << 20) return {double(1 << 20), "MiB"};
    if (max_abs >= 1 << 10) return {double(1 << 10), "KiB"};
    return {1, "bytes"};
  }
  if (unit == "bytes/s" || unit == "B/s") {
    if (max_abs >= 1e9) return {1e9, "GB/s"};
    if (max_abs >= 1e6) return {1e6, "MB/s"};
    if (max_abs >= 1e3) return {1e3, "kB/s"};
    return {1, "B/s"};
  }
  if (unit == "ns") {
    if (max_abs >= 1e9) return {1e9, "s"};
    if (max_abs >= 1e6) return {1e6, "ms"};
    if (max_abs >= 1e3) return {1e3, "us"};
    return {1, "ns"};
  }
  if (unit == "hertz" || unit == "Hz") {
    if (max_abs >= 1e9) return {1e9, "GHz"};
    if (max_abs >= 1e6) return {1e6, "MHz"};
    return {1, "Hz"};
  }
  return {1, unit};
}

std::string line_plot(const LinePlot& p) {
  const int w = p.width, h = p.height;
  const int pw = w - kLeft - kRight, ph = h - kTop - kBottom;
  // Data ranges.
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const Line& l : p.lines)
    for (size_t i = 0; i < l.x.size() && i < l.y.size(); ++i) {
      if (!finite(l.x[i])) continue;
      x0 = std::min(x0, l.x[i]);
      x1 = std::max(x1, l.x[i]);
      if (!finite(l.y[i])) continue;
      y0 = std::min(y0, l.y[i]);
      y1 = std::max(y1, l.y[i]);
    }
  for (const Band& b : p.bands) {
    x0 = std::min(x0, b.from);
    x1 = std::max(x1, b.to);
  }
  std::string s = fmt::format(
      R"(<svg xmlns="http://www.w3.org/2000/svg" class="{}" width="{}" height="{}" viewBox="0 0 {} {}" font-family="sans-serif" font-size="11" role="img" aria-label="{}">)",
      escape(p.css_class), w, h, w, h, escape(p.title));
  s += fmt::format(R"(<text x="{}" y="15" font-size="13" font-weight="bold">{}</text>)", kLeft, escape(p.title));
  if (!finite(x0) || !finite(y0)) {
    s += fmt::format(R"(<text x="{}" y="{}" fill="#666">no data</text></svg>)", kLeft + 10, kTop + ph / 2);
    return s;
  }
  if (p.y_from_zero && y0 > 0) y0 = 0;
  if (p.x_from_zero && x0 > 0) x0 = 0;
  const AxisUnit unit = readable_unit(p.y_unit, std::max(std::abs(y0), std::abs(y1)));
  y0 /= unit.divisor;
  y1 /= unit.divisor;
  if (!(y1 > y0)) y1 = y0 + (y0 == 0 ? 1 : std::abs(y0) * 0.1);
  std::vector<double> yt = nice_ticks(y0, y1, 4);
  if (yt.size() >= 2) {  // the axis ends on ticks
    const double step = yt[1] - yt[0];
    y0 = std::floor(y0 / step + 1e-9) * step;
    y1 = std::ceil(y1 / step - 1e-9) * step;
    yt = nice_ticks(y0, y1, static_cast<int>(std::lround((y1 - y0) / step)));
  }
  if (y1 <= y0) y1 = y0 + 1;
  if (x1 <= x0) x1 = x0 + 1;
  auto X = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * pw; };
  auto Y = [&](double y) { return kTop + ph - (y / unit.divisor - y0) / (y1 - y0) * ph; };

  // Bands under everything.
  for (const Band& b : p.bands) {
    const double a = X(std::max(b.from, x0)), e = X(std::min(b.to, x1));
    s += fmt::format(R"(<rect class="band" x="{:.1f}" y="{}" width="{:.1f}" height="{}" fill="{}" fill-opacity="{}"><title>{}</title></rect>)",
                     a, kTop, std::max(1.0, e - a), ph, escape(b.colour), b.opacity, escape(b.label));
    if (!b.label.empty())
      s += fmt::format(R"(<text x="{:.1f}" y="{}" font-size="10" fill="{}">{}</text>)", a + 2, kTop + 10,
                       escape(b.colour), escape(b.label));
  }
  // Axes, grid and ticks.
  s += fmt::format(R"(<g class="axes" stroke="#999" stroke-width="1"><line x1="{}" y1="{}" x2="{}" y2="{}"/><line x1="{}" y1="{}" x2="{}" y2="{}"/></g>)",
                   kLeft, kTop, kLeft, kTop + ph, kLeft, kTop + ph, kLeft + pw, kTop + ph);
  for (double t : yt) {
    const double y = kTop + ph - (t - y0) / (y1 - y0) * ph;
    s += fmt::format(R"(<line x1="{}" y1="{:.1f}" x2="{}" y2="{:.1f}" stroke="#eee"/>)", kLeft + 1, y, kLeft + pw, y);
    s += fmt::format(R"(<text class="ytick" x="{}" y="{:.1f}" text-anchor="end">{}</text>)", kLeft - 4, y + 4,
                     tick_label(t));
  }
  for (double t : nice_ticks(x0, x1, 8)) {
    const double x = X(t);
    s += fmt::format(R"(<line x1="{:.1f}" y1="{}" x2="{:.1f}" y2="{}" stroke="#999"/>)", x, kTop + ph, x, kTop + ph + 4);
    s += fmt::format(R"(<text class="xtick" x="{:.1f}" y="{}" text-anchor="middle">{}</text>)", x, kTop + ph + 15,
                     tick_label(t));
  }
  s += fmt::format(R"(<text x="{}" y="{}" text-anchor="middle" fill="#444">{}</text>)", kLeft + pw / 2, h - 6,
                   escape(p.x_label));
  s += fmt::format(R"~(<text transform="translate(12,{}) rotate(-90)" text-anchor="middle" fill="#444">{}</text>)~",
                   kTop + ph / 2, escape(unit.label.empty() ? "value" : unit.label));

  // Lines, thinned to min/max per pixel column.
  size_t colour_i = 0;
  std::vector<std::pair<std::string, std::string>> legend;
  for (const Line& l : p.lines) {
    const std::string colour = l.colour.empty() ? kPalette[colour_i++ % std::size(kPalette)] : l.colour;
    legend.emplace_back(l.label, colour);
    const size_t n = std::min(l.x.size(), l.y.size());
    std::vector<std::pair<double, double>> pts;  // pixel coordinates; NaN y: a gap
    if (n > static_cast<size_t>(2 * pw)) {
      int col = -1;
      double lo = INFINITY, hi = -INFINITY, lo_x = 0, hi_x = 0;
      auto flush = [&] {
        if (col < 0) return;
        if (!finite(lo)) {
          pts.emplace_back(kLeft + col, NAN);
        } else if (lo_x <= hi_x) {
          pts.emplace_back(X(lo_x), Y(lo));
          pts.emplace_back(X(hi_x), Y(hi));
        } else {
          pts.emplace_back(X(hi_x), Y(hi));
          pts.emplace_back(X(lo_x), Y(lo));
        }
        lo = INFINITY, hi = -INFINITY;
      };
      for (size_t i = 0; i < n; ++i) {
        if (!finite(l.x[i])) continue;
        const int c = static_cast<int>(X(l.x[i])) - kLeft;
        if (c != col) {
          flush();
          col = c;
        }
        if (!finite(l.y[i])) continue;
        if (l.y[i] < lo) lo = l.y[i], lo_x = l.x[i];
        if (l.y[i] > hi) hi = l.y[i], hi_x = l.x[i];
      }
      flush();
    } else {
      for (size_t i = 0; i < n; ++i)
        if (finite(l.x[i])) pts.emplace_back(X(l.x[i]), finite(l.y[i]) ? Y(l.y[i]) : NAN);
    }
    std::string d;
    bool pen_down = false;
    size_t drawn = 0;
    for (auto [x, y] : pts) {
      if (!finite(y)) {
        pen_down = false;
        continue;
      }
      d += fmt::format("{}{:.1f},{:.1f}", pen_down ? " L" : " M", x, y);
      pen_down = true;
      ++drawn;
    }
    if (drawn == 1) {  // a single point: a dot, not an invisible path
      s += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="2.5" fill="{}"/>)", pts.front().first, pts.front().second, colour);
    } else if (!d.empty()) {
      s += fmt::format(R"(<path class="line" d="{}" fill="none" stroke="{}" stroke-width="1.5"{}><title>{}</title></path>)", d,
                       colour, l.dashed ? R"( stroke-dasharray="5,3")" : "", escape(l.label));
    }
  }
  // Legend: one row under the title, left to right.
  double lx = kLeft;
  for (const auto& [label, colour] : legend) {
    s += fmt::format(R"(<g class="legend"><rect x="{:.0f}" y="27" width="12" height="4" fill="{}"/><text x="{:.0f}" y="33">{}</text></g>)",
                     lx, colour, lx + 15, escape(label));
    lx += 15 + 6.2 * static_cast<double>(label.size()) + 14;
  }
  s += "</svg>";
  return s;
}

std::string heat_colour(double v) {
  v = std::clamp(finite(v) ? v : 0.0, 0.0, 1.0);
  const int r = static_cast<int>(255 - 75 * v), g = static_cast<int>(255 - 230 * v), b = static_cast<int>(255 - 230 * v);
  return fmt::format("rgb({},{},{})", r, g, b);
}

std::string colour_scale(double lo, double hi, const std::string& caption, int width) {
  const int bar_h = 10, h = 44, steps = 40;
  std::string s = fmt::format(
      R"(<svg xmlns="http://www.w3.org/2000/svg" class="colour-scale" width="{}" height="{}" font-family="sans-serif" font-size="10">)",
      std::max<int>(width + 20, 20 + static_cast<int>(caption.size()) * 6), h);
  const double cw = static_cast<double>(width) / steps;
  for (int i = 0; i < steps; ++i)
    s += fmt::format(R"(<rect x="{:.1f}" y="4" width="{:.1f}" height="{}" fill="{}"/>)", 10 + i * cw, cw + 0.5, bar_h,
                     heat_colour((i + 0.5) / steps));
  s += fmt::format(R"(<rect x="10" y="4" width="{}" height="{}" fill="none" stroke="#999"/>)", width, bar_h);
  if (!(hi > lo)) hi = lo + 1;
  for (double t : nice_ticks(lo, hi, 4)) {
    if (t < lo - 1e-12 || t > hi + 1e-12) continue;
    const double x = 10 + (t - lo) / (hi - lo) * width;
    s += fmt::format(R"(<line x1="{:.1f}" y1="{}" x2="{:.1f}" y2="{}" stroke="#666"/><text x="{:.1f}" y="{}" text-anchor="middle">{}</text>)",
                     x, 4 + bar_h, x, 8 + bar_h, x, 20 + bar_h, tick_label(t));
  }
  s += fmt::format(R"(<text x="10" y="{}" fill="#444">{}</text></svg>)", h - 2, escape(caption));
  return s;
}

}  // namespace stackscope::svg
