#include <fmt/format.h>

#include <cmath>

#include "export/exporters.h"

namespace stackscope {

namespace {
// RFC 4180: quote a field holding a separator, quote or line break; double the quotes inside.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

// Inside the args column, ';' separates pairs and '=' key from value: escape both (and '\') with '\'.
std::string arg_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == ';' || c == '=') out += '\\';
    out += c;
  }
  return out;
}

std::string arg_text(const ArgValue& v) {
  if (auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (auto* d = std::get_if<double>(&v)) return fmt::format("{}", *d);
  return std::get<std::string>(v);
}
}  // namespace

ExportCounts export_csv_events(const RecordingReader& r, const ExportOptions& options, std::ostream& out) {
  ExportCounts counts;
  out << "layer,name,pid,tid,start_ns,duration_ns,flags,args\n";
  EventFilter filter;
  filter.layers = options.layers;
  std::string args;
  r.for_each_event(filter, [&](const Event& e) {
    args.clear();
    for (auto& a : e.args) {
      if (!args.empty()) args += ';';
      args += arg_escape(a.key) + '=' + arg_escape(arg_text(a.value));
    }
    out << layer_name(e.layer) << ',' << csv_field(e.name) << ',' << e.pid << ',' << e.tid << ',' << e.start_ns << ','
        << e.duration_ns << ',' << event_flags_text(e.flags) << ',' << csv_field(args) << '\n';
    ++counts.rows;
  });
  return counts;
}

ExportCounts export_csv_samples(const RecordingReader& r, const ExportOptions& options, std::ostream& out) {
  ExportCounts counts;
  out << "series,host,subsystem,unit,kind,source,t_ns,value\n";
  auto write_run = [&](const SeriesInfo& s, std::span<const int64_t> t, std::span<const double> v) {
    std::string prefix = fmt::format("{},{},{},{},{},{},", csv_field(s.key()), csv_field(s.host),
                                     subsystem_name(s.subsystem), csv_field(s.unit), series_kind_name(s.kind),
                                     csv_field(s.source));
    for (size_t i = 0; i < t.size(); ++i) {
      // {} prints the shortest text that reads back to the same double.
      // Non-finite values (a sampler's bad reading) become an empty field, never "nan".
      out << prefix << t[i] << ',' << (std::isfinite(v[i]) ? fmt::format("{}", v[i]) : std::string()) << '\n';
      ++counts.rows;
    }
  };
  r.for_each_sample_run([&](const SeriesInfo& s, std::span<const int64_t> t, std::span<const double> v) {
    if (series_matches(s, options.series_pattern)) write_run(s, t, v);
  });
  if (options.derived) {
    auto d = derived_series_of(r, options.series_pattern);
    for (auto& s : d.series)
      if (auto it = d.samples.find(s.id); it != d.samples.end()) write_run(s, it->second.first, it->second.second);
  }
  return counts;
}

}  // namespace stackscope
