#include "fleet/clickhouse_sample_reader.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <map>
#include <stdexcept>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "fleet/clickhouse_http.h"

namespace stackscope::fleet {
namespace {

// ClickHouse's TabSeparated escapes (\t \n \\ ...) undone.
std::string unescape_tsv(std::string_view field) {
  std::string out;
  out.reserve(field.size());
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] != '\\' || i + 1 == field.size()) {
      out += field[i];
      continue;
    }
    const char c = field[++i];
    switch (c) {
      case 't': out += '\t'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case '0': out += '\0'; break;
      default: out += c;
    }
  }
  return out;
}

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

// Never falls and rises at least once: a cumulative counter (its rate is what moves).
SeriesKind kind_of(const std::vector<double>& v) {
  bool rose = false;
  for (size_t i = 1; i < v.size(); ++i) {
    if (v[i] < v[i - 1]) return SeriesKind::gauge;
    rose = rose || v[i] > v[i - 1];
  }
  return rose ? SeriesKind::counter : SeriesKind::gauge;
}

template <typename T>
bool parse_number(std::string_view s, T& out) {
  const auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

}  // namespace

ClickHouseSource parse_clickhouse_source(const std::string& text) {
  constexpr std::string_view kScheme = "clickhouse://";
  const auto bad = [&](const std::string& why) {
    return std::invalid_argument(fmt::format("--source '{}': {} (expected clickhouse://HOST[:PORT]/DB)", text, why));
  };
  if (!std::string_view(text).starts_with(kScheme)) throw bad("not a clickhouse:// URL");
  const std::string rest = text.substr(kScheme.size());
  const size_t slash = rest.find('/');
  if (slash == std::string::npos || slash + 1 == rest.size()) throw bad("no database after the host");
  std::string host = rest.substr(0, slash), port = "8123";
  ClickHouseSource source;
  source.database = rest.substr(slash + 1);
  if (source.database.find_first_of("/?#") != std::string::npos) throw bad("the database name holds '/', '?' or '#'");
  // "[v6addr]:port" or "name:port"
  const size_t colon = host.rfind(':');
  if (colon != std::string::npos && (host.front() != '[' || host[colon - 1] == ']')) {
    port = host.substr(colon + 1);
    host = host.substr(0, colon);
  }
  unsigned p = 0;
  if (host.empty()) throw bad("no host");
  if (!parse_number(port, p) || p == 0 || p > 65535) throw bad("bad port '" + port + "'");
  source.url = fmt::format("http://{}:{}", host, p);
  return source;
}

std::vector<FleetHost> read_fleet_samples(const ClickHouseSource& source, const FleetSampleQuery& query) {
  std::string hosts;
  for (const std::string& h : query.hosts) hosts += (hosts.empty() ? "" : ", ") + clickhouse_string(h);
  // FINAL: a batch the agent sent twice is one set of rows (ReplacingMergeTree, schema.sql).
  const std::string sql = fmt::format(
      "SELECT host, series, device, unit, ts_ns, value FROM {}.samples FINAL WHERE job = '' AND ts_ns >= {} AND "
      "ts_ns < {}{} ORDER BY host, series, device, ts_ns LIMIT {} FORMAT TabSeparated",
      clickhouse_identifier(source.database), query.since_ns, query.until_ns,
      hosts.empty() ? std::string() : " AND host IN (" + hosts + ")", query.max_rows + 1);
  ClickHouseHttp http(source.url, query.timeout_s);
  const ClickHouseReply reply = http.post(sql);
  if (reply.status == 0) {  // the transport's error starts with the URL
    const size_t colon = reply.error.find(": ");
    throw std::runtime_error("cannot reach ClickHouse at " + source.url + ": " +
                             (colon == std::string::npos ? reply.error : reply.error.substr(colon + 2)));
  }
  if (!reply.ok()) throw std::runtime_error("ClickHouse at " + source.url + ": " + reply.describe());

  std::vector<FleetHost> out;
  std::string_view body = reply.body;
  size_t rows = 0;
  std::string prev_key;
  while (!body.empty()) {
    const size_t nl = body.find('\n');
    std::string_view line = body.substr(0, nl);
    body = nl == std::string_view::npos ? std::string_view() : body.substr(nl + 1);
    if (line.empty()) continue;
    std::string_view f[6];
    size_t n = 0;
    for (size_t from = 0; n < 6; ++n) {
      const size_t tab = line.find('\t', from);
      f[n] = line.substr(from, tab == std::string_view::npos ? std::string_view::npos : tab - from);
      if (tab == std::string_view::npos) {
        ++n;
        break;
      }
      from = tab + 1;
    }
    uint64_t ts = 0;
    double value = 0;
    if (n != 6 || !parse_number(f[4], ts) || !parse_number(f[5], value))
      throw std::runtime_error(fmt::format("ClickHouse at {}: unexpected row '{}'", source.url, line.substr(0, 200)));
    if (++rows > query.max_rows)
      throw std::runtime_error(fmt::format("more than {} samples in the span: narrow --since/--until or --hosts",
                                           query.max_rows));
    const std::string host = unescape_tsv(f[0]);
    if (out.empty() || out.back().host != host) {
      out.push_back({});
      out.back().host = host;
      prev_key.clear();
    }
    FleetHost& h = out.back();
    std::string name = unescape_tsv(f[1]), device = unescape_tsv(f[2]);
    const std::string key = name + '\0' + device;
    if (key != prev_key) {
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
    FleetSeries& s = h.series.back();
    s.t_ns.push_back(static_cast<int64_t>(ts));
    s.values.push_back(value);
    h.first_ns = h.rows == 0 ? static_cast<int64_t>(ts) : std::min(h.first_ns, static_cast<int64_t>(ts));
    h.last_ns = std::max(h.last_ns, static_cast<int64_t>(ts));
    ++h.rows;
  }
  for (FleetHost& h : out)
    for (FleetSeries& s : h.series) s.info.kind = kind_of(s.values);
  return out;
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
