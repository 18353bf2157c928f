#include "fleet/fleet_stragglers.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>

namespace stackscope::fleet {

std::string FleetRankWaits::Worker::label() const {
  return fmt::format("{}/{} rank {}", host, job, rank.empty() ? "?" : rank);
}

FleetRankWaits read_fleet_waits(const ClickHouseSource& source, const FleetSampleQuery& query) {
  std::string hosts;
  for (const std::string& h : query.hosts) hosts += (hosts.empty() ? "" : ", ") + clickhouse_string(h);
  // Whole intervals inside the span; the layers' rows of one interval added up (FINAL: a batch sent twice once).
  const std::string sql = fmt::format(
      "SELECT host, job, rank, interval_start_ns, max(interval_ns), sum(wait_ns) FROM {}.event_aggregates FINAL "
      "WHERE interval_start_ns >= {} AND interval_start_ns + interval_ns <= {}{} GROUP BY host, job, rank, "
      "interval_start_ns ORDER BY host, job, rank, interval_start_ns LIMIT {} FORMAT TabSeparated",
      clickhouse_identifier(source.database), query.since_ns, query.until_ns,
      hosts.empty() ? std::string() : " AND host IN (" + hosts + ")", query.max_rows + 1);
  FleetRankWaits out;
  const ClickHouseReply reply = query_clickhouse(source, sql, query.timeout_s);
  if (!reply.ok()) {
    // A store made before the wait_ns column: nothing to compare (18.16: "Unknown identifier", later: "Missing").
    if (reply.body.find("Code: 47") != std::string::npos && reply.body.find("wait_ns") != std::string::npos) {
      out.wait_column = false;
      return out;
    }
    throw std::runtime_error("ClickHouse at " + source.url + ": " + reply.describe());
  }
  struct Rows {
    std::map<int64_t, int64_t> wait_by_interval;
    int64_t total = 0;
  };
  std::map<std::tuple<std::string, std::string, std::string>, Rows> by_worker;
  std::map<int64_t, size_t> interval_votes;
  size_t rows = 0;
  for_each_tsv_row(reply.body, [&](std::string_view line, const std::vector<std::string_view>& f) {
    int64_t start = 0, interval = 0;
    uint64_t wait = 0;  // a sum of UInt64
    if (f.size() != 6 || !parse_number(f[3], start) || !parse_number(f[4], interval) || !parse_number(f[5], wait))
      throw std::runtime_error(fmt::format("ClickHouse at {}: unexpected row '{}'", source.url, line.substr(0, 200)));
    if (++rows > query.max_rows)
      throw std::runtime_error(fmt::format("more than {} event aggregates in the span: narrow --since/--until or --hosts",
                                           query.max_rows));
    Rows& r = by_worker[{unescape_tsv(f[0]), unescape_tsv(f[1]), unescape_tsv(f[2])}];
    const auto w = static_cast<int64_t>(std::min<uint64_t>(wait, uint64_t{1} << 62));
    r.wait_by_interval[start] += w;
    r.total += w;
    ++interval_votes[interval];
  });
  if (!interval_votes.empty())
    out.interval_ns = std::max_element(interval_votes.begin(), interval_votes.end(), [](const auto& a, const auto& b) {
                        return a.second < b.second;
                      })->first;
  std::vector<const Rows*> kept;
  for (const auto& [key, r] : by_worker) {
    if (r.total <= 0) {  // no CUDA sync seen (a CPU job, or only the python / torch layers traced)
      ++out.ranks_without_waits;
      continue;
    }
    out.workers.push_back({std::get<0>(key), std::get<1>(key), std::get<2>(key)});
    kept.push_back(&r);
  }
  // The intervals every kept worker reported in: a rank with no row there was not running (or not traced) yet.
  std::map<int64_t, size_t> seen;
  for (const Rows* r : kept)
    for (const auto& [start, wait] : r->wait_by_interval) ++seen[start];
  for (const auto& [start, n] : seen) {
    if (n < kept.size()) {
      ++out.partial_intervals;
      continue;
    }
    out.interval_start_ns.push_back(start);
    std::vector<int64_t> row;
    for (const Rows* r : kept) row.push_back(r->wait_by_interval.at(start));
    out.wait_ns.push_back(std::move(row));
  }
  return out;
}

FleetStragglers fleet_straggler_verdict(const FleetRankWaits& waits, const analyze::VerdictOptions& options) {
  FleetStragglers out;
  // One synchronisation point per interval, ending where the interval ends; a worker per rank, with no operations
  // (the store has none): the verdict compares the waits only.
  analyze::SyncPoints points;
  for (size_t k = 0; k < waits.interval_start_ns.size(); ++k) {
    points.end_ns.push_back(waits.interval_start_ns[k] + waits.interval_ns);
    points.wait_ns.push_back(waits.wait_ns[k]);
    points.name.push_back(0);
    points.step.push_back(static_cast<int32_t>(k));
  }
  points.period = 1;
  points.steps = static_cast<int>(points.end_ns.size());
  TimelineSet set;
  for (const FleetRankWaits::Worker& w : waits.workers) {
    WorkerTimeline t;
    t.worker = w.label();
    t.host = w.host;
    t.rank = std::atoi(w.rank.c_str());
    set.workers.push_back(std::move(t));
  }
  out.verdict = analyze::wait_verdict(set, points, options);
  analyze::StragglerVerdict& v = out.verdict;
  if (v.kind == analyze::VerdictKind::one_straggler || v.kind == analyze::VerdictKind::slow_group) {
    for (int w : v.workers)
      if (std::find(out.slow_hosts.begin(), out.slow_hosts.end(), waits.workers[static_cast<size_t>(w)].host) ==
          out.slow_hosts.end())
        out.slow_hosts.push_back(waits.workers[static_cast<size_t>(w)].host);
    // What the late ranks did instead is not in the store (no CPU or off-CPU time per rank): the verdict's cause,
    // read from empty timelines, would be a guess.
    v.cause = analyze::CauseClass::unknown;
    v.cause_detail = "not in the store (it holds each rank's waits, not what it did instead): see the host's node "
                     "series (Reveal above) or record the job on that node";
  }
  std::string who;
  for (int w : v.workers) who += (who.empty() ? "" : ", ") + waits.workers[static_cast<size_t>(w)].label();
  switch (v.kind) {
    case analyze::VerdictKind::none: out.summary = "no straggler: " + v.evidence; break;
    case analyze::VerdictKind::one_straggler:
    case analyze::VerdictKind::slow_group:
      out.summary = fmt::format("slow host{} {} ({}): {}", out.slow_hosts.size() == 1 ? "" : "s",
                                fmt::join(out.slow_hosts, ", "), who, v.evidence);
      break;
    case analyze::VerdictKind::spread:
      out.summary = "no single straggler, lateness spread over the ranks (" + who + "): " + v.evidence;
      break;
    case analyze::VerdictKind::undetermined: out.summary = "undetermined: " + v.evidence; break;
  }
  return out;
}

}  // namespace stackscope::fleet
