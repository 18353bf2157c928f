// Reading the fleet store back: the node series (samples with job '') that agents shipped to ClickHouse
// (deploy/clickhouse/schema.sql), per host, for `stackscope analyze --source clickhouse://HOST:PORT/DB`.
//
// The samples table carries name, device, unit, Unix ns, value and the series' kind (gauge, counter: cumulative,
// analysed as a rate, static_value) as the agent's sampler declared it. Rows written before the kind column (or by
// a store not yet migrated: the query then runs without it) have none: for such a series the kind is guessed from
// the values (never falling and rising at least once: a counter; else a gauge, so a gauge that only rises is
// misread as a counter). The subsystem comes from the name's prefix (cpu., mem., net., disk., gpu. ...).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fleet/clickhouse_query.h"
#include "model/series.h"

namespace stackscope::fleet {

struct FleetSampleQuery {
  int64_t since_ns = 0, until_ns = 0;  // Unix ns, [since, until)
  std::vector<std::string> hosts;      // empty: every host with samples in the span
  size_t max_rows = 50'000'000;        // more is refused (all rows are held in memory)
  double timeout_s = 60;
};

struct FleetSeries {
  SeriesInfo info;  // id: its index in FleetHost::series; host set; kind stored or guessed, subsystem inferred
  bool kind_stored = false;  // info.kind came from the rows' kind column, not from the values
  std::vector<int64_t> t_ns;  // Unix ns, ascending
  std::vector<double> values;
};

struct FleetHost {
  std::string host;
  std::vector<FleetSeries> series;
  int64_t first_ns = 0, last_ns = 0;  // the host's first and last sample in the span
  size_t rows = 0;
  size_t kinds_guessed = 0;  // series whose rows carry no kind (see above)
};

// Whether the store's samples table has the kind column (false: every kind was guessed).
struct FleetSamples {
  std::vector<FleetHost> hosts;
  bool kind_column = true;
};

// The node series of the chosen hosts in the span, hosts in name order. Throws std::runtime_error when the server
// cannot be reached or refuses the query (its message included), or when more than max_rows rows match.
FleetSamples read_fleet_samples(const ClickHouseSource& source, const FleetSampleQuery& query);

// The kind a series' values suggest when no kind was stored: never falling and rising at least once, a counter.
SeriesKind guess_series_kind(const std::vector<double>& values);

// Each host's clock against the ClickHouse server's over the span (clock_offsets, schema.sql): the mean offset of
// its probes (server time = host time + offset_ns) and how far to trust it. Probes whose round trip took over a
// second are left out. Empty when the store has no such table (made before it) or no probes in the span.
struct HostClockOffset {
  int64_t offset_ns = 0;
  size_t probes = 0;
  int64_t median_rtt_ns = 0;
  // 0.29 s / sqrt(probes) (now() is whole seconds; the probes fall at every phase of it) plus half the round trip.
  double uncertainty_ns() const;
};
struct FleetClockOffsets {
  std::map<std::string, HostClockOffset> by_host;
  bool table = true;  // false: the store has no clock_offsets table
};
FleetClockOffsets read_fleet_clock_offsets(const ClickHouseSource& source, const FleetSampleQuery& query);

// Moves every time of `host` by `shift_ns` (to the server's clock: its offset).
void shift_host_times(FleetHost& host, int64_t shift_ns);

// The hosts' common span: from the latest first sample to the earliest last sample (every host reported
// throughout). begin >= end when the hosts' data do not overlap.
struct FleetSpan {
  int64_t begin_ns = 0, end_ns = 0;
};
FleetSpan common_span(const std::vector<FleetHost>& hosts);

}  // namespace stackscope::fleet
