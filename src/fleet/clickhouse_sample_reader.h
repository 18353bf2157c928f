// Reading the fleet store back: the node series (samples with job '') that agents shipped to ClickHouse
// (deploy/clickhouse/schema.sql), per host, for `stackscope analyze --source clickhouse://HOST:PORT/DB`.
//
// The samples table carries name, device, unit, Unix ns and value, not the series' kind or subsystem: a series
// whose values never fall and rise at least once over the span is taken as a cumulative counter (analysed as a
// rate), every other one as a gauge; the subsystem comes from the name's prefix (cpu., mem., net., disk., gpu. ...).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/series.h"

namespace stackscope::fleet {

struct ClickHouseSource {
  std::string url;       // "http://HOST:PORT"
  std::string database;
};

// "clickhouse://HOST[:PORT]/DB" (port 8123, ClickHouse's HTTP port, when left out). Throws std::invalid_argument
// naming what is wrong.
ClickHouseSource parse_clickhouse_source(const std::string& text);

struct FleetSampleQuery {
  int64_t since_ns = 0, until_ns = 0;  // Unix ns, [since, until)
  std::vector<std::string> hosts;      // empty: every host with samples in the span
  size_t max_rows = 50'000'000;        // more is refused (all rows are held in memory)
  double timeout_s = 60;
};

struct FleetSeries {
  SeriesInfo info;  // id: its index in FleetHost::series; host set; kind and subsystem inferred (see above)
  std::vector<int64_t> t_ns;  // Unix ns, ascending
  std::vector<double> values;
};

struct FleetHost {
  std::string host;
  std::vector<FleetSeries> series;
  int64_t first_ns = 0, last_ns = 0;  // the host's first and last sample in the span
  size_t rows = 0;
};

// The node series of the chosen hosts in the span, hosts in name order. Throws std::runtime_error when the server
// cannot be reached or refuses the query (its message included), or when more than max_rows rows match.
std::vector<FleetHost> read_fleet_samples(const ClickHouseSource& source, const FleetSampleQuery& query);

// The hosts' common span: from the latest first sample to the earliest last sample (every host reported
// throughout). begin >= end when the hosts' data do not overlap.
struct FleetSpan {
  int64_t begin_ns = 0, end_ns = 0;
};
FleetSpan common_span(const std::vector<FleetHost>& hosts);

}  // namespace stackscope::fleet
