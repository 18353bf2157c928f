#include "analyze/reveal/host_series_scan.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

#include "analyze/reveal/attribution.h"

namespace stackscope::analyze {

namespace {

bool is_cpu_core(const std::string& device) {
  return device.size() > 3 && device.compare(0, 3, "cpu") == 0 &&
         std::all_of(device.begin() + 3, device.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// One series' samples into bins, each finished bin into the detector.
struct SeriesBins {
  SeriesBins(const SeriesNoveltyOptions& o, bool counter) : detector(o), counter(counter) {}
  SeriesNoveltyDetector detector;
  bool counter;
  CounterDifferencer differ;
  std::optional<size_t> bin;  // the bin being filled
  double sum = 0;
  size_t n = 0;

  void flush(double bin_seconds) {
    if (bin && n > 0) detector.add(*bin, counter ? sum / bin_seconds : sum / static_cast<double>(n));
    sum = 0;
    n = 0;
  }
};

}  // namespace

std::vector<HostSeriesFinding> scan_host_series(const SampleStream& stream, int64_t bin_ns,
                                                const HostSeriesScanOptions& options) {
  if (bin_ns <= 0) throw std::invalid_argument("host series scan: the bin width must be positive");
  const double bin_seconds = static_cast<double>(bin_ns) * 1e-9;
  std::map<SeriesId, size_t> index;
  std::vector<std::optional<SeriesBins>> bins(stream.series.size());
  for (size_t i = 0; i < stream.series.size(); ++i) {
    const SeriesInfo& s = stream.series[i];
    if (s.category == SeriesCategory::static_value || s.kind == SeriesKind::static_value || is_cpu_core(s.device))
      continue;
    SeriesNoveltyOptions o = options.detector;
    if (o.bin_seconds == 0) o.bin_seconds = bin_seconds;  // cool-down and new-normal times bounded in time too
    // A day as the season, where it fits in the history the detector keeps (bins of a minute or more).
    constexpr int64_t kDay = 86'400'000'000'000;
    if (o.season_bins == 0 && kDay / bin_ns <= static_cast<int64_t>(o.history_bins) && kDay / bin_ns >= 2)
      o.season_bins = static_cast<size_t>(kDay / bin_ns);
    o.range_floor =
        std::max(o.range_floor, options.floor_resolutions * feature_resolution(s.unit, WindowFeature::mean));
    bins[i].emplace(o, s.kind == SeriesKind::counter);
    index[s.id] = i;
  }
  stream.replay([&](const SeriesInfo& s, std::span<const int64_t> t, std::span<const double> v) {
    auto it = index.find(s.id);
    if (it == index.end()) return;
    SeriesBins& b = *bins[it->second];
    for (size_t k = 0; k < t.size(); ++k) {
      if (t[k] < stream.begin_ns || !std::isfinite(v[k])) continue;
      const auto bin = static_cast<size_t>((t[k] - stream.begin_ns) / bin_ns);
      if (b.bin && bin < *b.bin) continue;  // out of order: its bin was judged already
      double x = v[k];
      if (b.counter) {
        auto step = b.differ.push(t[k], v[k]);
        if (!step) continue;
        x = step->increment;
      }
      if (!b.bin || bin != *b.bin) {
        b.flush(bin_seconds);
        b.bin = bin;
      }
      b.sum += x;
      ++b.n;
    }
  });
  std::vector<HostSeriesFinding> out;
  for (size_t i = 0; i < bins.size(); ++i) {
    if (!bins[i]) continue;
    bins[i]->flush(bin_seconds);
    bins[i]->detector.finish();
    for (const NoveltySpan& sp : bins[i]->detector.spans()) {
      HostSeriesFinding f;
      f.series = i;
      f.start_ns = stream.begin_ns + static_cast<int64_t>(sp.first_bin) * bin_ns;
      f.end_ns = stream.begin_ns + static_cast<int64_t>(sp.last_bin + 1) * bin_ns;
      f.rate = bins[i]->counter;
      f.span = sp;
      out.push_back(f);
    }
  }
  std::sort(out.begin(), out.end(), [](const HostSeriesFinding& a, const HostSeriesFinding& b) {
    return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.series < b.series;
  });
  return out;
}

}  // namespace stackscope::analyze
