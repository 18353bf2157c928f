#include "fleet/clickhouse_sample_reader.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "fleet/clickhouse_query.h"

namespace stackscope::fleet {
namespace {

Subsystem subsystem_of(std::string_view name) {
  const std::string_view prefix = name.substr(0, name.find('.'));
  static const std::map<std::string_view, Subsystem, std::less<>> kByPrefix = {
      {"cpu", Subsystem::cpu},         {"perf", Subsystem::cpu},         {"thermal", Subsystem::cpu},
      {"hwmon", Subsystem::cpu},       {"irq", Subsystem::cpu},          {"kernel", Subsystem::cpu},
      {"gpu", Subsystem::gpu},         {"mem", Subsystem::memory},       {"memory", Subsystem::memory},
      {"vm", Subsystem::memory},       {"net", Subsystem::network},      {"tcp", Subsystem::network},
      {"udp", Subsystem::network},     {"disk", Subsystem::storage},     {"io", Subsystem::storage},
      {"fs", Subsystem::storage}};
  auto it = kByPrefix.find(prefix);
  return it == kByPrefix.end() ? Subsystem::software : it->second;
}

}  // namespace

SeriesKind guess_series_kind(const std::vector<double>& v) {
  bool rose = false;
  for (size_t i = 1; i < v.size(); ++i) {
    if (v[i] < v[i - 1]) return SeriesKind::gauge;
    rose = rose || v[i] > v[i - 1];
  }
  return rose ? SeriesKind::counter : SeriesKind::gauge;
}

FleetSamples read_fleet_samples(const ClickHouseSource& source, const FleetSampleQuery& query) {
  std::string hosts;
  for (const std::string& h : query.hosts) hosts += (hosts.empty() ? "" : ", ") + clickhouse_string(h);
  // FINAL: a batch the agent sent twice is one set of rows (ReplacingMergeTree, schema.sql).
  const auto sql = [&](bool with_kind) {
    return fmt::format(
        "SELECT host, series, device, unit, ts_ns, value{} FROM {}.samples FINAL WHERE job = '' AND ts_ns >= {} AND "
        "ts_ns < {}{} ORDER BY host, series, device, ts_ns LIMIT {} FORMAT TabSeparated",
        with_kind ? ", kind" : "", clickhouse_identifier(source.database), query.since_ns, query.until_ns,
        hosts.empty() ? std::string() : " AND host IN (" + hosts + ")", query.max_rows + 1);
  };
  FleetSamples result;
  ClickHouseReply reply = query_clickhouse(source, sql(true), query.timeout_s);
  // A store made before the kind column and not migrated yet (the agent adds it: clickhouse_sink.h): 18.16 answers
  // "Code: 47 ... Unknown identifier: kind", later servers "Missing columns: 'kind'".
  if (!reply.ok() && reply.body.find("Code: 47") != std::string::npos && reply.body.find("kind") != std::string::npos) {
    result.kind_column = false;
    reply = query_clickhouse(source, sql(false), query.timeout_s);
  }
  if (!reply.ok()) throw std::runtime_error("ClickHouse at " + source.url + ": " + reply.describe());

  std::vector<FleetHost>& out = result.hosts;
  const size_t columns = result.kind_column ? 7 : 6;
  size_t rows = 0;
  std::string prev_key;
  // The current series' kind, from the first of its rows that carries one (-1: none yet). Not an optional: GCC 12
  // warns of it as maybe uninitialised inside the lambda.
  int stored = -1;
  const auto close_series = [&] {
    if (out.empty() || out.back().series.empty()) return;
    FleetHost& h = out.back();
    FleetSeries& s = h.series.back();
    s.kind_stored = stored >= 0;
    s.info.kind = s.kind_stored ? static_cast<SeriesKind>(stored) : guess_series_kind(s.values);
    h.kinds_guessed += !s.kind_stored;
    stored = -1;
  };
  for_each_tsv_row(reply.body, [&](std::string_view line, const std::vector<std::string_view>& f) {
    uint64_t ts = 0;
    double value = 0;
    if (f.size() != columns || !parse_number(f[4], ts) || !parse_number(f[5], value))
      throw std::runtime_error(fmt::format("ClickHouse at {}: unexpected row '{}'", source.url, line.substr(0, 200)));
    if (++rows > query.max_rows)
      throw std::runtime_error(fmt::format("more than {} samples in the span: narrow --since/--until or --hosts",
                                           query.max_rows));
    const std::string host = unescape_tsv(f[0]);
    if (out.empty() || out.back().host != host) {
      close_series();
      out.push_back({});
      out.back().host = host;
      prev_key.clear();
    }
    FleetHost& h = out.back();
    std::string name = unescape_tsv(f[1]), device = unescape_tsv(f[2]);
    const std::string key = name + '\0' + device;
    if (key != prev_key) {
      close_series();
      FleetSeries s;
      s.info.id = static_cast<SeriesId>(h.series.size());
      s.info.name = std::move(name);
      s.info.device = std::move(device);
      s.info.unit = unescape_tsv(f[3]);
      s.info.host = host;
      s.info.subsystem = subsystem_of(s.info.name);
      s.info.source = "clickhouse";
      h.series.push_back(std::move(s));
      prev_key = key;
    }
    if (columns == 7 && stored < 0)  // '' (rows from before the column): none
      if (const auto kind = parse_series_kind(f[6])) stored = static_cast<int>(*kind);
    FleetSeries& s = h.series.back();
    s.t_ns.push_back(static_cast<int64_t>(ts));
    s.values.push_back(value);
    h.first_ns = h.rows == 0 ? static_cast<int64_t>(ts) : std::min(h.first_ns, static_cast<int64_t>(ts));
    h.last_ns = std::max(h.last_ns, static_cast<int64_t>(ts));
    ++h.rows;
  });
  close_series();
  return result;
}

double HostClockOffset::uncertainty_ns() const {
  return probes ? 0.29e9 / std::sqrt(static_cast<double>(probes)) + 0.5 * static_cast<double>(median_rtt_ns) : 0.0;
}

FleetClockOffsets read_fleet_clock_offsets(const ClickHouseSource& source, const FleetSampleQuery& query) {
  std::string hosts;
  for (const std::string& h : query.hosts) hosts += (hosts.empty() ? "" : ", ") + clickhouse_string(h);
  const std::string sql = fmt::format(
      "SELECT host, count(), toInt64(avg(offset_ns)), toInt64(quantile(0.5)(rtt_ns)) FROM {}.clock_offsets FINAL "
      "WHERE ts_ns >= {} AND ts_ns < {} AND rtt_ns < 1000000000{} GROUP BY host ORDER BY host FORMAT TabSeparated",
      clickhouse_identifier(source.database), query.since_ns, query.until_ns,
      hosts.empty() ? std::string() : " AND host IN (" + hosts + ")");
  FleetClockOffsets out;
  const ClickHouseReply reply = query_clickhouse(source, sql, query.timeout_s);
  if (!reply.ok()) {
    // "Code: 60 ... Table ... doesn't exist": a store made before the table.
    if (reply.body.find("Code: 60") != std::string::npos) {
      out.table = false;
      return out;
    }
    throw std::runtime_error("ClickHouse at " + source.url + ": " + reply.describe());
  }
  for_each_tsv_row(reply.body, [&](std::string_view line, const std::vector<std::string_view>& f) {
    HostClockOffset o;
    if (f.size() != 4 || !parse_number(f[1], o.probes) || !parse_number(f[2], o.offset_ns) ||
        !parse_number(f[3], o.median_rtt_ns))
      throw std::runtime_error(fmt::format("ClickHouse at {}: unexpected row '{}'", source.url, line.substr(0, 200)));
    out.by_host[unescape_tsv(f[0])] = o;
  });
  return out;
}

void shift_host_times(FleetHost& host, int64_t shift_ns) {
  for (FleetSeries& s : host.series)
    for (int64_t& t : s.t_ns) t += shift_ns;
  host.first_ns += shift_ns;
  host.last_ns += shift_ns;
}

FleetSpan common_span(const std::vector<FleetHost>& hosts) {
  FleetSpan span{std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
  if (hosts.empty()) return {0, 0};
  for (const FleetHost& h : hosts) {
    span.begin_ns = std::max(span.begin_ns, h.first_ns);
    span.end_ns = std::min(span.end_ns, h.last_ns);
  }
  return span;
}

}  // namespace stackscope::fleet
