// Small inline-SVG charts for the HTML pages (report, stragglers): a line plot with axes, tick labels, units,
// a legend and shaded time bands, and a colour scale for heatmaps. Pure string building: the pages stay one
// self-contained file with no script and no network.
#pragma once
#include <string>
#include <vector>

namespace stackscope::svg {

// Escapes text for HTML/SVG content and attribute values.
std::string escape(const std::string& s);

// "Nice" tick positions (1, 2, 5 x 10^k steps) covering [lo, hi], about `target` of them.
std::vector<double> nice_ticks(double lo, double hi, int target = 5);
// A short tick label: 0.25, 12, 1.5k, 3.2M, 2e-05.
std::string tick_label(double v);

// A unit for an axis: values are divided by `divisor` and the axis says `label` ("GiB", "ms").
struct AxisUnit {
  double divisor = 1;
  std::string label;
};
// Picks a readable scale for values up to `max_abs` in `unit` ("bytes" -> GiB/MiB/KiB, "ns" -> ms/us, "bytes/s"
// -> GB/s...); other units are kept as they are.
AxisUnit readable_unit(const std::string& unit, double max_abs);

struct Line {
  std::string label;
  std::vector<double> x, y;  // NaN y: a gap
  std::string colour;        // empty: the palette's next colour
  bool dashed = false;
};

// A shaded stretch of x (an incident, a phase), labelled at its top.
struct Band {
  double from = 0, to = 0;
  std::string label;
  std::string colour = "#e4572e";
  double opacity = 0.18;
};

struct LinePlot {
  std::string title;
  std::string x_label = "time since start (s)";
  std::string y_unit;  // the values' unit; readable_unit() rescales the axis
  std::vector<Line> lines;
  std::vector<Band> bands;
  int width = 900, height = 260;
  bool y_from_zero = true;  // the y axis starts at 0 unless a value is negative
  bool x_from_zero = false;  // the x axis starts at 0 (a whole run's time axis)
  std::string css_class = "plot";
};

// An <svg> element. A line with more points than twice the plot's pixel width is thinned to the minimum and
// maximum of each pixel column, so that a spike stays visible and the page stays small.
std::string line_plot(const LinePlot& plot);

// White (0) to dark red (1); NaN and values outside [0, 1] are clamped.
std::string heat_colour(double v);
// A horizontal colour bar from `lo` to `hi` with ticks and a caption, for a heatmap drawn with heat_colour.
std::string colour_scale(double lo, double hi, const std::string& caption, int width = 260);

}  // namespace stackscope::svg
