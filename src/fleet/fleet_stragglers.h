// Stragglers across nodes from the fleet store: each rank's waits per interval (event_aggregates.wait_ns: its host
// blocked in CUDA *Synchronize calls, waiting for its GPU and, through the collectives queued there, for the slowest
// rank) read back per (host, job, rank), and the straggler verdict of a recording (analyze/stragglers, wait_verdict)
// run over them with each interval as one synchronisation point: the healthy ranks wait for the straggler, it does
// not wait, so the rank that waited least over many intervals kept the others waiting.
//
// What the store cannot tell: job labels are per node ("<comm>-<leader pid>"), so the ranks with waits in the
// span are compared as the ranks of one job (narrow with --hosts / --since to one job's nodes and time); and it
// holds no per-rank CPU or off-CPU time, so the verdict names who was late, not why.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "analyze/stragglers/straggler.h"
#include "fleet/clickhouse_sample_reader.h"

namespace stackscope::fleet {

struct FleetRankWaits {
  struct Worker {
    std::string host, job, rank;
    std::string label() const;  // "host/job rank R"
  };
  std::vector<Worker> workers;            // ranks that waited at all in the span, by host, job, rank
  int64_t interval_ns = 0;                // the agents' aggregate interval (the most common one)
  std::vector<int64_t> interval_start_ns;  // intervals every worker reported in, ascending
  std::vector<std::vector<int64_t>> wait_ns;  // [interval][worker]
  size_t partial_intervals = 0;  // intervals some worker did not report in (a job starting or ending): left out
  size_t ranks_without_waits = 0;  // (host, job, rank) with events but no wait in the span (no CUDA layer)
  bool wait_column = true;         // false: the store predates event_aggregates.wait_ns (nothing to compare)
};

// The ranks' waits of the chosen hosts in [since, until). Throws std::runtime_error as read_fleet_samples does.
FleetRankWaits read_fleet_waits(const ClickHouseSource& source, const FleetSampleQuery& query);

struct FleetStragglers {
  analyze::StragglerVerdict verdict;  // per_worker indexed like waits.workers; cause unknown (see above)
  std::vector<std::string> slow_hosts;  // the hosts of verdict.workers when kind is one_straggler or slow_group
  std::string summary;                  // one line a person reads
};

// wait_verdict over the intervals as synchronisation points. Undetermined with fewer than 2 ranks or 5 intervals.
FleetStragglers fleet_straggler_verdict(const FleetRankWaits& waits,
                                        const analyze::VerdictOptions& options = {});

}  // namespace stackscope::fleet
