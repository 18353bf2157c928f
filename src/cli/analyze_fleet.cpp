// `stackscope analyze --source clickhouse://HOST:PORT/DB --since ... [--until ...] [--hosts a,b]`: Reveal over
// the node series that agents shipped to the fleet store. Wiring only: the store's reader (fleet/) fetches the
// hosts' samples, they are put on one time base, and the Reveal host pipeline (analyze_reveal.cpp) runs over them
// as over one recording per host: per-host incidents, and with 3+ hosts the cross-host comparison. Then the ranks'
// waits per interval (event_aggregates) go to the straggler verdict across nodes (fleet/fleet_stragglers.h).
#include <ctime>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <utility>
#include <span>
#include <string_view>

#include <fmt/format.h>

#include "analyze/reveal/window_sizing.h"
#include "analyze/reveal/windows.h"
#include "cli/analyze.h"
#include "cli/reveal_hosts.h"
#ifdef STACKSCOPE_HAVE_CLICKHOUSE
#include "fleet/clickhouse_sample_reader.h"
#include "fleet/fleet_stragglers.h"
#endif

namespace stackscope::cli {

#ifdef STACKSCOPE_HAVE_CLICKHOUSE
namespace {

int64_t unix_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A duration back from now ("2h") or a UTC time ("2026-11-27T00:10:00Z", "2026-11-27 00:10:00"), as Unix ns.
int64_t parse_time_arg(const std::string& flag, const std::string& text, int64_t now_ns) {
  if (auto d = analyze::parse_duration_ns(text)) return now_ns - *d;
  for (const char* format : {"%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d"}) {
    std::tm tm{};
    const char* end = ::strptime(text.c_str(), format, &tm);
    if (!end) continue;
    const std::string_view rest(end);
    if (!rest.empty() && rest != "Z") continue;
    return static_cast<int64_t>(::timegm(&tm)) * 1'000'000'000;
  }
  throw std::invalid_argument(fmt::format(
      "bad {} '{}': a duration back from now (30m, 2h; units: {}) or a UTC time (2026-11-27T00:10:00Z)", flag, text,
      analyze::duration_units()));
}

// The straggler verdict over the ranks' waits in the span: its report and its JSON.
std::pair<std::string, nlohmann::json> stragglers_across_nodes(const fleet::ClickHouseSource& source,
                                                               const fleet::FleetSampleQuery& query) {
  const fleet::FleetRankWaits waits = fleet::read_fleet_waits(source, query);
  std::string text = "\n== stragglers across nodes (each rank's waits per interval, event_aggregates.wait_ns) ==\n";
  nlohmann::json j = {{"ranks", waits.workers.size()}, {"ranks_without_waits", waits.ranks_without_waits},
                      {"interval_ns", waits.interval_ns}, {"intervals", waits.interval_start_ns.size()},
                      {"partial_intervals", waits.partial_intervals}, {"wait_column", waits.wait_column}};
  if (!waits.wait_column) {
    text += "the event_aggregates table has no wait_ns column (made by an earlier stackscope; the agent adds it): "
            "no waits to compare\n";
    j["verdict"] = "undetermined";
    return {text, j};
  }
  if (waits.workers.size() < 2) {
    text += fmt::format("{} rank(s) waited in the span ({} more with events but no CUDA sync: CPU jobs, or the cuda "
                        "layer not traced): nobody to compare\n",
                        waits.workers.size(), waits.ranks_without_waits);
    j["verdict"] = "undetermined";
    return {text, j};
  }
  const fleet::FleetStragglers result = fleet::fleet_straggler_verdict(waits);
  const analyze::StragglerVerdict& v = result.verdict;
  std::set<std::string> hosts;
  for (const auto& w : waits.workers) hosts.insert(w.host);
  text += fmt::format("{} ranks on {} hosts compared as one job's ranks, over {} intervals of {:.0f} s (each a "
                      "synchronisation point; {} intervals where some rank had no row left out)\n",
                      waits.workers.size(), hosts.size(), waits.interval_start_ns.size(), waits.interval_ns / 1e9,
                      waits.partial_intervals);
  nlohmann::json per = nlohmann::json::array();
  for (size_t w = 0; w < waits.workers.size(); ++w) {
    const analyze::WorkerLateness& pw = v.per_worker[w];
    const double share = waits.interval_ns > 0 ? pw.wait_ns / static_cast<double>(waits.interval_ns) : 0;
    text += fmt::format("  {:<40}  waited {:7.3f} s per interval ({:4.1f} %), last to arrive at {:3.0f} % of them\n",
                        waits.workers[w].label(), pw.wait_ns / 1e9, 100 * share, 100 * pw.last_share);
    per.push_back({{"host", waits.workers[w].host}, {"job", waits.workers[w].job}, {"rank", waits.workers[w].rank},
                   {"wait_ns_per_interval", pw.wait_ns}, {"late_ns_per_interval", pw.late_ns},
                   {"last_share", pw.last_share}});
  }
  text += "verdict: " + result.summary + "\n";
  if (!v.cause_detail.empty()) text += "cause: " + v.cause_detail + "\n";
  nlohmann::json workers = nlohmann::json::array();
  for (int w : v.workers) workers.push_back(waits.workers[static_cast<size_t>(w)].label());
  j.update({{"verdict", analyze::verdict_kind_name(v.kind)}, {"slow_hosts", result.slow_hosts},
            {"workers", workers}, {"confidence", v.confidence}, {"excess_s", v.excess_ns / 1e9},
            {"evidence", v.evidence}, {"cause", analyze::cause_class_name(v.cause)}, {"per_rank", per}});
  return {text, j};
}

AnalysisOutput failure(const std::string& message) {
  AnalysisOutput out;
  out.text = "fleet: " + message + "\n";
  out.json = {{"error", message}};
  out.status = 2;
  return out;
}

}  // namespace

AnalysisOutput analyze_fleet(const AnalyzeOptions& options) {
  const fleet::ClickHouseSource source = fleet::parse_clickhouse_source(options.source);
  if (options.since.empty()) return failure("--source needs --since (a duration back from now or a UTC time)");
  const int64_t now = unix_now_ns();
  fleet::FleetSampleQuery query;
  query.since_ns = parse_time_arg("--since", options.since, now);
  query.until_ns = options.until.empty() ? now : parse_time_arg("--until", options.until, now);
  query.hosts = options.hosts;
  if (query.until_ns <= query.since_ns)
    return failure(fmt::format("--until ({}) is not after --since ({})", utc_iso(query.until_ns), utc_iso(query.since_ns)));

  fleet::FleetSamples samples = fleet::read_fleet_samples(source, query);
  std::vector<fleet::FleetHost>& hosts = samples.hosts;
  const std::string where = fmt::format("{}/{}", source.url, source.database);
  if (hosts.empty())
    return failure(fmt::format("no host samples in {} from {} to {}{}", where, utc_iso(query.since_ns),
                               utc_iso(query.until_ns),
                               options.hosts.empty() ? "" : " for the hosts given"));
  std::vector<std::string> missing;
  for (const std::string& h : options.hosts)
    if (std::none_of(hosts.begin(), hosts.end(), [&h](const fleet::FleetHost& f) { return f.host == h; }))
      missing.push_back(h);

  // One time base: the rows carry Unix ns as each agent stamped them (its monotonic clock plus its realtime offset
  // when it read the sample). Each host's times are moved onto the ClickHouse server's clock by the mean offset its
  // agent measured (clock_offsets; a host without probes is taken as on time), then every host is cut into the same
  // windows over the span all hosts reported in.
  const fleet::FleetClockOffsets clocks = fleet::read_fleet_clock_offsets(source, query);
  std::map<std::string, fleet::HostClockOffset> offset_of;
  for (fleet::FleetHost& h : hosts) {
    const auto it = clocks.by_host.find(h.host);
    if (it == clocks.by_host.end()) continue;
    offset_of[h.host] = it->second;
    fleet::shift_host_times(h, it->second.offset_ns);
  }
  const fleet::FleetSpan span = fleet::common_span(hosts);
  if (span.end_ns <= span.begin_ns)
    return failure("the hosts' samples do not overlap in time: no common span to compare them over");

  std::string text = fmt::format("== fleet: {} ({} hosts, {} to {}) ==\n", where, hosts.size(), utc_iso(query.since_ns),
                                 utc_iso(query.until_ns));
  std::string clock_note;
  if (!clocks.table)
    clock_note = "no clock_offsets table in the store (made before it): times as each agent stamped them, "
                 "inter-host skew not corrected";
  else if (offset_of.empty())
    clock_note = "no clock probes in the span: times as each agent stamped them, inter-host skew not corrected";
  else
    clock_note = fmt::format("{} of {} hosts moved onto the ClickHouse server's clock by their agents' measured "
                             "offsets{}",
                             offset_of.size(), hosts.size(),
                             offset_of.size() < hosts.size() ? " (the others, without probes, as stamped)" : "");
  text += fmt::format("clock alignment: {}; all hosts cut into the same windows over the common span {} to {} ({:.0f} "
                      "s; samples outside it dropped)\n",
                      clock_note, utc_iso(span.begin_ns), utc_iso(span.end_ns), (span.end_ns - span.begin_ns) / 1e9);
  size_t series = 0, guessed = 0;
  for (const fleet::FleetHost& h : hosts) {
    series += h.series.size();
    guessed += h.kinds_guessed;
  }
  if (!samples.kind_column)
    text += "series kinds: the samples table has no kind column (a store made before it; the agent adds it): every "
            "kind guessed from the values (never falling and rising: counter, as a rate; else gauge)\n";
  else if (guessed)
    text += fmt::format("series kinds: {} of {} as the agents stored them; {} guessed from the values (rows written "
                        "before the kind column: never falling and rising, counter; else gauge)\n",
                        series - guessed, series, guessed);
  else
    text += fmt::format("series kinds: all {} as the agents stored them\n", series);
  for (const std::string& h : missing) text += "warning: host " + h + " has no samples in the span\n";

  nlohmann::json jhosts = nlohmann::json::array();
  std::vector<RevealHostInput> inputs;
  for (fleet::FleetHost& h : hosts) {
    size_t counters = 0, outside = 0;
    analyze::SamplingIntervalEstimator interval;
    RevealHostInput in;
    in.label = "clickhouse:" + h.host;
    in.host = h.host;
    in.stream.begin_ns = span.begin_ns;
    in.stream.end_ns = span.end_ns + 1;  // the last common sample included
    for (const fleet::FleetSeries& s : h.series) {
      in.stream.series.push_back(s.info);
      counters += s.info.kind == SeriesKind::counter;
      const auto lo = std::lower_bound(s.t_ns.begin(), s.t_ns.end(), in.stream.begin_ns);
      const auto hi = std::lower_bound(s.t_ns.begin(), s.t_ns.end(), in.stream.end_ns);
      outside += s.t_ns.size() - static_cast<size_t>(hi - lo);
      interval.add_run(s.info.id, std::span<const int64_t>(s.t_ns.data() + (lo - s.t_ns.begin()),
                                                           static_cast<size_t>(hi - lo)));
    }
    in.sampling_interval_ns = interval.interval_ns();
    const fleet::FleetHost* host = &h;
    const int64_t begin = in.stream.begin_ns, end = in.stream.end_ns;
    in.stream.replay = [host, begin, end](const analyze::SampleRunVisitor& visit) {
      for (const fleet::FleetSeries& s : host->series) {
        const size_t lo = static_cast<size_t>(std::lower_bound(s.t_ns.begin(), s.t_ns.end(), begin) - s.t_ns.begin());
        const size_t hi = static_cast<size_t>(std::lower_bound(s.t_ns.begin(), s.t_ns.end(), end) - s.t_ns.begin());
        if (hi > lo)
          visit(s.info, std::span<const int64_t>(s.t_ns.data() + lo, hi - lo),
                std::span<const double>(s.values.data() + lo, hi - lo));
      }
    };
    const auto clock = offset_of.find(h.host);
    const std::string offset_text =
        clock == offset_of.end()
            ? std::string("clock as stamped")
            : fmt::format("clock {:+.1f} ms +- {:.0f} ms ({} probes)", clock->second.offset_ns / 1e6,
                          clock->second.uncertainty_ns() / 1e6, clock->second.probes);
    text += fmt::format("  host {}: {} samples of {} series ({} counters), first {} last {}; {} outside the common "
                        "span; {}\n",
                        h.host, h.rows, h.series.size(), counters, utc_iso(h.first_ns), utc_iso(h.last_ns), outside,
                        offset_text);
    jhosts.push_back({{"host", h.host}, {"samples", h.rows}, {"series", h.series.size()}, {"counters", counters},
                      {"kinds_guessed", h.kinds_guessed},
                      {"first_utc", utc_iso(h.first_ns)}, {"last_utc", utc_iso(h.last_ns)},
                      {"clock_offset_ns", clock == offset_of.end() ? 0 : clock->second.offset_ns},
                      {"clock_probes", clock == offset_of.end() ? 0 : clock->second.probes},
                      {"clock_uncertainty_ns", clock == offset_of.end() ? 0.0 : clock->second.uncertainty_ns()},
                      {"samples_outside_common_span", outside}});
    inputs.push_back(std::move(in));
  }
  if (hosts.size() < 3)
    text += fmt::format("cross-host: {} host(s); 3 or more are needed to tell which one departs from its peers\n",
                        hosts.size());

  AnalysisOutput reveal = analyze_reveal_hosts(std::move(inputs), options);
  auto [stragglers_text, stragglers] = stragglers_across_nodes(source, query);
  AnalysisOutput out;
  out.text = text + reveal.text + stragglers_text;
  out.status = reveal.status;
  out.json = {{"source", options.source},
              {"since_utc", utc_iso(query.since_ns)},
              {"until_utc", utc_iso(query.until_ns)},
              {"alignment",
               {{"method", offset_of.empty() ? "unix_ns_as_stamped_common_windows"
                                             : "server_clock_offsets_common_windows"},
                {"common_start_utc", utc_iso(span.begin_ns)},
                {"common_end_utc", utc_iso(span.end_ns)},
                {"clock_offsets_table", clocks.table},
                {"skew_corrected", !offset_of.empty()}}},
              {"hosts", jhosts},
              {"missing_hosts", missing},
              {"reveal", reveal.json},
              {"stragglers", stragglers}};
  return out;
}

#else

AnalysisOutput analyze_fleet(const AnalyzeOptions&) {
  AnalysisOutput out;
  out.text = "fleet: this stackscope was built without the ClickHouse client (libcurl's header was missing)\n";
  out.json = {{"error", out.text}};
  out.status = 2;
  return out;
}

#endif

}  // namespace stackscope::cli
