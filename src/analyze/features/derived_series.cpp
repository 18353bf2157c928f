#include "analyze/features/derived_series.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <string>
#include <tuple>

#include "analyze/reveal/windows.h"

namespace stackscope::analyze {

namespace {

using Points = std::pair<std::vector<int64_t>, std::vector<double>>;

struct Builder {
  DerivedSeries out;
  SeriesId next_id;

  Points& add(const SeriesInfo& like, std::string name, std::string unit, SeriesCategory category,
              std::string device_override = "\x01") {
    SeriesInfo s;
    s.id = next_id++;
    s.name = std::move(name);
    s.subsystem = like.subsystem;
    s.unit = std::move(unit);
    s.kind = SeriesKind::gauge;
    s.category = category;
    s.host = like.host;
    s.device = device_override == "\x01" ? like.device : device_override;
    s.source = "derived";
    out.series.push_back(s);
    return out.samples[s.id];
  }
  // Drops series that got no points (inputs too short) and renumbers the rest densely from first_id.
  void finish(SeriesId first) {
    SeriesSamples kept;
    std::vector<SeriesInfo> series;
    for (SeriesInfo& s : out.series) {
      auto it = out.samples.find(s.id);
      if (it == out.samples.end() || it->second.first.empty()) continue;
      SeriesId id = first + static_cast<SeriesId>(series.size());
      kept[id] = std::move(it->second);
      s.id = id;
      series.push_back(std::move(s));
    }
    out.series = std::move(series);
    out.samples = std::move(kept);
  }
};

const Points* points_of(const SeriesSamples& samples, SeriesId id) {
  auto it = samples.find(id);
  if (it == samples.end()) return nullptr;
  const Points& p = it->second;
  if (p.first.size() != p.second.size() || p.first.size() < 2) return nullptr;
  if (!std::is_sorted(p.first.begin(), p.first.end())) return nullptr;
  return &p;
}

// Times present in every input (samples read in one go share their timestamp), with the value of each.
struct Joined {
  std::vector<int64_t> t;
  std::vector<std::vector<double>> v;  // v[k][i]: input k at t[i]
};
Joined join(const std::vector<const Points*>& in) {
  Joined j;
  j.v.resize(in.size());
  if (in.empty()) return j;
  std::vector<size_t> pos(in.size(), 0);
  for (;;) {
    int64_t tmax = INT64_MIN;
    for (size_t k = 0; k < in.size(); ++k) {
      if (pos[k] >= in[k]->first.size()) return j;
      tmax = std::max(tmax, in[k]->first[pos[k]]);
    }
    bool all = true;
    for (size_t k = 0; k < in.size(); ++k) {
      while (pos[k] < in[k]->first.size() && in[k]->first[pos[k]] < tmax) ++pos[k];
      if (pos[k] >= in[k]->first.size()) return j;
      if (in[k]->first[pos[k]] != tmax) all = false;
    }
    if (!all) continue;
    j.t.push_back(tmax);
    for (size_t k = 0; k < in.size(); ++k) j.v[k].push_back(in[k]->second[pos[k]++]);
  }
}

double clamp01(double x) { return std::clamp(x, 0.0, 1.0); }

// Rate unit and factor for a counter's unit: time counters become the fraction of each second spent.
std::optional<std::pair<std::string, double>> rate_unit(const std::string& unit) {
  if (unit == "jiffies") return std::nullopt;  // needs USER_HZ; utilisation covers CPU time
  if (unit == "nanoseconds") return std::pair<std::string, double>{"ratio", 1e-9};
  if (unit == "microseconds") return std::pair<std::string, double>{"ratio", 1e-6};
  if (unit == "milliseconds") return std::pair<std::string, double>{"ratio", 1e-3};
  if (unit == "seconds") return std::pair<std::string, double>{"ratio", 1.0};
  if (unit == "microjoules") return std::pair<std::string, double>{"watts", 1e-6};
  if (unit == "joules") return std::pair<std::string, double>{"watts", 1.0};
  return std::pair<std::string, double>{unit + "/s", 1.0};
}

void counter_rates(Builder& b, std::span<const SeriesInfo> series, const SeriesSamples& samples) {
  for (const SeriesInfo& s : series) {
    if (s.kind != SeriesKind::counter || s.name.rfind("cpu.time.", 0) == 0) continue;
    auto unit = rate_unit(s.unit);
    const Points* p = points_of(samples, s.id);
    if (!unit || !p) continue;
    Points& out = b.add(s, s.name + ".rate", unit->first, s.category);
    CounterDifferencer diff;
    for (size_t i = 0; i < p->first.size(); ++i) {
      if (!std::isfinite(p->second[i])) continue;
      auto step = diff.push(p->first[i], p->second[i]);
      if (!step || p->first[i] <= (i ? p->first[i - 1] : INT64_MIN)) continue;
      double r = step->rate_per_s * unit->second;
      if (!std::isfinite(r)) continue;
      out.first.push_back(p->first[i]);
      out.second.push_back(r);
    }
  }
}

using Group = std::tuple<std::string, std::string>;  // host, device

template <size_t N>
std::map<Group, std::array<const SeriesInfo*, N>> group_by_device(std::span<const SeriesInfo> series,
                                                                  const std::array<std::string_view, N>& names) {
  std::map<Group, std::array<const SeriesInfo*, N>> groups;
  for (const SeriesInfo& s : series)
    for (size_t k = 0; k < N; ++k)
      if (s.name == names[k]) {
        auto [it, fresh] = groups.try_emplace({s.host, s.device});
        if (fresh) it->second.fill(nullptr);
        it->second[k] = &s;
      }
  return groups;
}

void cpu_utilisation(Builder& b, std::span<const SeriesInfo> series, const SeriesSamples& samples) {
  static constexpr std::array<std::string_view, 8> kFields = {"cpu.time.user",   "cpu.time.nice",  "cpu.time.system",
                                                              "cpu.time.idle",   "cpu.time.iowait", "cpu.time.irq",
                                                              "cpu.time.softirq", "cpu.time.steal"};
  enum { user, nice, system, idle, iowait, irq, softirq, steal };
  for (auto& [key, infos] : group_by_device(series, kFields)) {
    if (!infos[idle] || !infos[user] || !infos[system]) continue;
    std::vector<const Points*> in;
    std::vector<int> which;
    for (int k = 0; k < 8; ++k)
      if (infos[k]) {
        const Points* p = points_of(samples, infos[k]->id);
        if (!p) continue;
        in.push_back(p);
        which.push_back(k);
      }
    if (std::find(which.begin(), which.end(), idle) == which.end()) continue;
    Joined j = join(in);
    if (j.t.size() < 2) continue;
    const SeriesInfo& like = *infos[idle];
    Points& util = b.add(like, "cpu.util", "ratio", SeriesCategory::dynamic);
    struct Part {
      const char* name;
      std::vector<int> fields;
      Points* out;
    };
    std::vector<Part> parts = {{"cpu.util.user", {user, nice}, nullptr},
                               {"cpu.util.system", {system}, nullptr},
                               {"cpu.util.iowait", {iowait}, nullptr},
                               {"cpu.util.irq", {irq, softirq}, nullptr},
                               {"cpu.util.steal", {steal}, nullptr}};
    for (Part& part : parts) part.out = &b.add(like, part.name, "ratio", SeriesCategory::dynamic);
    for (size_t i = 1; i < j.t.size(); ++i) {
      std::array<double, 8> d{};
      double total = 0;
      for (size_t k = 0; k < which.size(); ++k) {
        // Per-core iowait can step backwards (a known kernel quirk): a negative step counts as none.
        double x = j.v[k][i] - j.v[k][i - 1];
        d[which[k]] = std::isfinite(x) && x > 0 ? x : 0;
        total += d[which[k]];
      }
      if (total <= 0) continue;
      util.first.push_back(j.t[i]);
      util.second.push_back(clamp01((total - d[idle] - d[iowait]) / total));
      for (Part& part : parts) {
        double sum = 0;
        bool any = false;
        for (int f : part.fields)
          if (std::find(which.begin(), which.end(), f) != which.end()) {
            sum += d[f];
            any = true;
          }
        if (!any) continue;
        part.out->first.push_back(j.t[i]);
        part.out->second.push_back(clamp01(sum / total));
      }
    }
  }
}

// ratio of the increments of two counters joined on equal times (per CPU, and summed over CPUs per host).
void increment_ratio(Builder& b, std::span<const SeriesInfo> series, const SeriesSamples& samples,
                     std::string_view num_name, std::string_view den_name, const char* out_name, bool clamp,
                     const char* unit) {
  std::array<std::string_view, 2> names = {num_name, den_name};
  auto groups = group_by_device(series, names);
  // Totals over every device of a host, on the times all of them share.
  std::map<std::string, std::pair<std::vector<const Points*>, std::vector<const Points*>>> per_host;
  const SeriesInfo* host_like = nullptr;
  auto emit = [&](const SeriesInfo& like, const std::vector<const Points*>& nums,
                  const std::vector<const Points*>& dens, std::string device) {
    std::vector<const Points*> in = nums;
    in.insert(in.end(), dens.begin(), dens.end());
    Joined j = join(in);
    if (j.t.size() < 2) return;
    Points& out = b.add(like, out_name, unit, SeriesCategory::dynamic, std::move(device));
    for (size_t i = 1; i < j.t.size(); ++i) {
      double n = 0, d = 0;
      for (size_t k = 0; k < nums.size(); ++k) n += j.v[k][i] - j.v[k][i - 1];
      for (size_t k = 0; k < dens.size(); ++k) d += j.v[nums.size() + k][i] - j.v[nums.size() + k][i - 1];
      if (!(d > 0) || !(n >= 0)) continue;
      double r = n / d;
      if (!std::isfinite(r)) continue;
      out.first.push_back(j.t[i]);
      out.second.push_back(clamp ? clamp01(r) : r);
    }
  };
  for (auto& [key, infos] : groups) {
    if (!infos[0] || !infos[1]) continue;
    const Points* n = points_of(samples, infos[0]->id);
    const Points* d = points_of(samples, infos[1]->id);
    if (!n || !d) continue;
    emit(*infos[1], {n}, {d}, infos[1]->device);
    if (!std::get<1>(key).empty()) {
      auto& h = per_host[std::get<0>(key)];
      h.first.push_back(n);
      h.second.push_back(d);
      host_like = infos[1];
    }
  }
  for (auto& [host, nd] : per_host)
    if (nd.first.size() > 1 && host_like) {
      SeriesInfo like = *host_like;
      like.host = host;
      emit(like, nd.first, nd.second, "");
    }
}

void memory_utilisation(Builder& b, std::span<const SeriesInfo> series, const SeriesSamples& samples) {
  std::array<std::string_view, 2> names = {"mem.MemAvailable", "mem.MemTotal"};
  for (auto& [key, infos] : group_by_device(series, names)) {
    if (!infos[0] || !infos[1]) continue;
    const Points* a = points_of(samples, infos[0]->id);
    const Points* t = points_of(samples, infos[1]->id);
    if (!a || !t) continue;
    Joined j = join({a, t});
    Points& out = b.add(*infos[0], "mem.util", "ratio", SeriesCategory::dynamic);
    for (size_t i = 0; i < j.t.size(); ++i) {
      if (!(j.v[1][i] > 0)) continue;
      out.first.push_back(j.t[i]);
      out.second.push_back(clamp01(1.0 - j.v[0][i] / j.v[1][i]));
    }
  }
}

void network_utilisation(Builder& b, std::span<const SeriesInfo> series, const SeriesSamples& samples) {
  std::array<std::string_view, 3> names = {"net.rx.bytes", "net.tx.bytes", "net.link.speed"};
  for (auto& [key, infos] : group_by_device(series, names)) {
    if (!infos[0] || !infos[1] || !infos[2]) continue;
    auto sp = samples.find(infos[2]->id);
    if (sp == samples.end() || sp->second.second.empty()) continue;
    double bits_per_s = sp->second.second.back();  // static: the link's speed when recording started
    const Points* rx = points_of(samples, infos[0]->id);
    const Points* tx = points_of(samples, infos[1]->id);
    if (!(bits_per_s > 0) || !rx || !tx) continue;
    Joined j = join({rx, tx});
    Points& out = b.add(*infos[0], "net.util", "ratio", SeriesCategory::dynamic);
    for (size_t i = 1; i < j.t.size(); ++i) {
      double dt = static_cast<double>(j.t[i] - j.t[i - 1]) * 1e-9;
      double drx = j.v[0][i] - j.v[0][i - 1], dtx = j.v[1][i] - j.v[1][i - 1];
      if (!(dt > 0) || drx < 0 || dtx < 0) continue;
      // Full duplex: the busier direction is the link's utilisation.
      out.first.push_back(j.t[i]);
      out.second.push_back(clamp01(std::max(drx, dtx) * 8.0 / dt / bits_per_s));
    }
  }
}

}  // namespace

DerivedSeries derive_series(std::span<const SeriesInfo> series, const SeriesSamples& samples,
                            const DerivedSeriesOptions& options) {
  SeriesId first = options.first_id;
  if (first == 0) {
    for (const SeriesInfo& s : series) first = std::max(first, s.id);
    for (auto& [id, p] : samples) first = std::max(first, id);
    ++first;
  }
  Builder b{{}, first};
  if (options.counter_rates) counter_rates(b, series, samples);
  if (options.cpu_utilisation) cpu_utilisation(b, series, samples);
  if (options.memory_utilisation) memory_utilisation(b, series, samples);
  if (options.network_utilisation) network_utilisation(b, series, samples);
  if (options.pmu_ratios) {
    increment_ratio(b, series, samples, "perf.instructions", "perf.cycles", "cpu.ipc", false, "ratio");
    increment_ratio(b, series, samples, "perf.cache_misses", "perf.cache_references", "cpu.cache_miss_rate", true,
                    "ratio");
    increment_ratio(b, series, samples, "perf.branch_misses", "perf.branch_instructions", "cpu.branch_miss_rate",
                    true, "ratio");
    increment_ratio(b, series, samples, "perf.stalled_cycles_frontend", "perf.cycles", "cpu.stall_frontend_ratio",
                    true, "ratio");
    increment_ratio(b, series, samples, "perf.stalled_cycles_backend", "perf.cycles", "cpu.stall_backend_ratio",
                    true, "ratio");
  }
  b.finish(first);
  return std::move(b.out);
}

DerivedSeries derive_series(std::span<const SeriesInfo> series, std::span<const Sample> samples,
                            const DerivedSeriesOptions& options) {
  SeriesSamples grouped;
  std::vector<const Sample*> sorted;
  sorted.reserve(samples.size());
  for (const Sample& s : samples) sorted.push_back(&s);
  std::stable_sort(sorted.begin(), sorted.end(), [](const Sample* a, const Sample* b) {
    return a->series != b->series ? a->series < b->series : a->t_ns < b->t_ns;
  });
  for (const Sample* s : sorted) {
    auto& p = grouped[s->series];
    p.first.push_back(s->t_ns);
    p.second.push_back(s->value);
  }
  return derive_series(series, grouped, options);
}

}  // namespace stackscope::analyze
