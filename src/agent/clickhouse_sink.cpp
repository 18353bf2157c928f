#include "agent/clickhouse_sink.h"

#include <algorithm>
#include <cmath>
#include <iostream>

#include <fmt/format.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include "fleet/clickhouse_http.h"
#include "agent/clickhouse_spool.h"
#include "model/clock.h"
#include "model/series.h"

namespace stackscope::agent {

using fleet::clickhouse_identifier;
using fleet::clickhouse_string;
using fleet::ClickHouseHttp;
using fleet::ClickHouseReply;

namespace {

constexpr int64_t kMaxBackoffNs = 30'000'000'000;
constexpr int64_t kStopGraceNs = 2'000'000'000;

void log_line(const std::string& text) { std::cerr << "stackscope agent: clickhouse: " << text << "\n" << std::flush; }

// Row text for ClickHouse: invalid UTF-8 (a process name, a device) replaced rather than thrown on.
std::string dump_row(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

// The spooled rows with their batch key in front: {"batch_id":"...","row_index":N, ...the row's fields}.
std::string with_batch_key(const std::string& payload, const std::string& batch_id) {
  std::string out;
  out.reserve(payload.size() + payload.size() / 8 + 64);
  size_t row = 0, from = 0;
  while (from < payload.size()) {
    size_t eol = payload.find('\n', from);
    if (eol == std::string::npos) eol = payload.size();
    if (eol > from + 1 && payload[from] == '{') {
      out += fmt::format("{{\"batch_id\":\"{}\",\"row_index\":{},", batch_id, row++);
      out.append(payload, from + 1, eol - from - 1);
      out += '\n';
    }
    from = eol + 1;
  }
  return out;
}

// Columns added to schema.sql's tables after the first release: the sink adds them to tables made before.
struct AddedColumn {
  const char* table;
  const char* name;
  const char* definition;  // type, default and place, as ALTER TABLE ... ADD COLUMN takes them
};
constexpr AddedColumn kAddedColumns[] = {
    {"samples", "kind", "String DEFAULT '' AFTER value"},
    {"event_aggregates", "wait_ns", "UInt64 DEFAULT 0 AFTER duration_ns"},
};

// TabSeparated lines of an answer.
std::vector<std::string> answer_lines(const std::string& body) {
  std::vector<std::string> out;
  for (size_t from = 0; from < body.size();) {
    size_t eol = body.find('\n', from);
    if (eol == std::string::npos) eol = body.size();
    if (eol > from) out.push_back(body.substr(from, eol - from));
    from = eol + 1;
  }
  return out;
}

}  // namespace

struct ClickHouseMetrics {
  explicit ClickHouseMetrics(prometheus::Registry& r)
      : batches(prometheus::BuildCounter().Name("stackscope_clickhouse_batches_sent_total").Help("Batches ClickHouse acknowledged, by table").Register(r)),
        rows(prometheus::BuildCounter().Name("stackscope_clickhouse_rows_sent_total").Help("Rows ClickHouse acknowledged, by table").Register(r)),
        errors(prometheus::BuildCounter().Name("stackscope_clickhouse_send_errors_total").Help("Failed requests to ClickHouse (the batch stays in the spool and is retried)").Register(r)),
        dropped(prometheus::BuildCounter().Name("stackscope_clickhouse_dropped_rows_total").Help("Rows lost before ClickHouse, by reason (spool_full, buffer_full, spool_error)").Register(r)),
        spool_bytes(prometheus::BuildGauge().Name("stackscope_clickhouse_spool_size_bytes").Help("Bytes of the on-disk spool of batches not yet acknowledged").Register(r)),
        spool_batches(prometheus::BuildGauge().Name("stackscope_clickhouse_spool_batches").Help("Batches in the spool not yet acknowledged").Register(r)),
        oldest_age(prometheus::BuildGauge().Name("stackscope_clickhouse_spool_oldest_batch_age_seconds").Help("Age of the oldest batch not yet acknowledged (0: none)").Register(r)),
        send_errors(errors.Add({})),
        bytes(spool_bytes.Add({})),
        pending(spool_batches.Add({})),
        age(oldest_age.Add({})) {}
  prometheus::Family<prometheus::Counter>& batches;
  prometheus::Family<prometheus::Counter>& rows;
  prometheus::Family<prometheus::Counter>& errors;
  prometheus::Family<prometheus::Counter>& dropped;
  prometheus::Family<prometheus::Gauge>& spool_bytes;
  prometheus::Family<prometheus::Gauge>& spool_batches;
  prometheus::Family<prometheus::Gauge>& oldest_age;
  prometheus::Counter& send_errors;
  prometheus::Gauge& bytes;
  prometheus::Gauge& pending;
  prometheus::Gauge& age;
  uint64_t spool_dropped_rows = 0;  // the spool's count already added to `dropped`
};

// Forwards to the next sink and copies each sample as a row of `samples`.
class ClickHouseSink::SampleTee final : public TelemetrySink {
 public:
  SampleTee(ClickHouseSink& sink, TelemetrySink& next, std::string job)
      : sink_(sink), next_(next), job_(std::move(job)) {}
  SeriesId add_series(const SeriesInfo& info) override {
    const SeriesId id = next_.add_series(info);
    std::lock_guard lk(mu_);
    series_[id] = info;
    return id;
  }
  void append_event(Event&& e) override { next_.append_event(std::move(e)); }
  void append_samples(std::span<const Sample> samples) override {
    next_.append_samples(samples);
    const int64_t offset = sink_.clock_offset_ns_.load(std::memory_order_relaxed);
    std::vector<std::string> rows;
    rows.reserve(samples.size());
    {
      std::lock_guard lk(mu_);
      for (const Sample& s : samples) {
        auto it = series_.find(s.series);
        if (it == series_.end() || !std::isfinite(s.value)) continue;  // ClickHouse's Float64 takes no NaN in JSON
        rows.push_back(dump_row({{"host", sink_.host_}, {"job", job_}, {"series", it->second.name},
                                 {"device", it->second.device}, {"unit", it->second.unit},
                                 {"ts_ns", static_cast<uint64_t>(s.t_ns + offset)}, {"value", s.value},
                                 {"kind", std::string(series_kind_name(it->second.kind))}}));
      }
    }
    for (auto& r : rows) sink_.add_row("samples", std::move(r));
  }
  void add_drops(std::string_view source, uint64_t n) override { next_.add_drops(source, n); }
  void add_note(std::string_view source, std::string_view text) override { next_.add_note(source, text); }

 private:
  ClickHouseSink& sink_;
  TelemetrySink& next_;
  std::string job_;
  std::mutex mu_;
  std::map<SeriesId, SeriesInfo> series_;
};

ClickHouseSink::ClickHouseSink(const ClickHouseSettings& settings, const std::string& data_dir, std::string host,
                               prometheus::Registry& registry)
    : settings_(settings), host_(std::move(host)), clock_offset_ns_(realtime_offset_ns()) {
  const std::string dir = settings_.spool_dir.empty() ? data_dir + "/clickhouse-spool" : settings_.spool_dir;
  spool_ = std::make_unique<ClickHouseSpool>(dir, settings_.spool_max_bytes);
  http_ = std::make_unique<ClickHouseHttp>(settings_.url, settings_.timeout_s);
  metrics_ = std::make_unique<ClickHouseMetrics>(registry);
  for (const char* t : kTables) {  // every table's series from the start, at 0
    metrics_->batches.Add({{"table", t}});
    metrics_->rows.Add({{"table", t}});
  }
  for (const char* reason : {"spool_full", "buffer_full", "spool_error"}) metrics_->dropped.Add({{"reason", reason}});
  metrics_->spool_dropped_rows = spool_->dropped_rows();
  check_front_ = spool_->pending_batches() > 0;  // the first may have arrived before the agent stopped
  if (spool_->pending_batches())
    log_line(fmt::format("{} batch(es) of an earlier run wait in the spool {}: sent first", spool_->pending_batches(), dir));
  publish_stats();
  thread_ = std::thread([this] { run(); });
}

ClickHouseSink::~ClickHouseSink() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::unique_ptr<TelemetrySink> ClickHouseSink::sample_tee(TelemetrySink& next, std::string job) {
  return std::make_unique<SampleTee>(*this, next, std::move(job));
}

void ClickHouseSink::add_row(const std::string& table, std::string row) {
  std::lock_guard lk(mu_);
  Buffer& b = buffers_[table];
  // Rows wait here only while the sending thread writes the spool: a bound against a stalled disk.
  if (b.rows.size() >= 20 * settings_.batch_rows + 10000) {
    metrics_->dropped.Add({{"reason", "buffer_full"}}).Increment();
    ++stats_.dropped_rows;
    return;
  }
  if (b.rows.empty()) b.first_ns = monotonic_ns();
  b.rows.push_back(std::move(row));
  if (b.rows.size() >= settings_.batch_rows) wake_.notify_one();
}

void ClickHouseSink::add_event_counts(const JobLabels& job, const std::string& rank, Layer layer, uint64_t events,
                                      int64_t duration_ns, int64_t wait_ns) {
  std::lock_guard lk(mu_);
  const int64_t now = realtime_ns();
  const int64_t start = now - now % settings_.aggregate_interval_ns;
  if (start != interval_start_ns_) {
    close_interval_locked(interval_start_ns_);
    interval_start_ns_ = start;
  }
  Totals& t = aggregates_[AggregateKey{job.job, job.pod, job.container, rank, layer}];
  t.events += events;
  t.duration_ns += duration_ns;
  t.wait_ns += wait_ns;
}

void ClickHouseSink::close_interval_locked(int64_t interval_start) {
  std::vector<std::string> rows;
  for (const auto& [k, t] : aggregates_)
    rows.push_back(dump_row({{"host", host_}, {"job", k.job}, {"pod", k.pod}, {"container", k.container},
                             {"rank", k.rank}, {"layer", std::string(layer_name(k.layer))},
                             {"interval_start_ns", static_cast<uint64_t>(interval_start)},
                             {"interval_ns", static_cast<uint64_t>(settings_.aggregate_interval_ns)},
                             {"events", t.events}, {"duration_ns", static_cast<uint64_t>(std::max<int64_t>(0, t.duration_ns))},
                             {"wait_ns", static_cast<uint64_t>(std::max<int64_t>(0, t.wait_ns))}}));
  aggregates_.clear();
  Buffer& b = buffers_["event_aggregates"];
  if (b.rows.empty() && !rows.empty()) b.first_ns = monotonic_ns();
  for (auto& r : rows) b.rows.push_back(std::move(r));
}

void ClickHouseSink::add_incident(const JobLabels& job, const nlohmann::json& report) {
  std::string cls = "unexplained";
  if (report.contains("cause") && report["cause"].is_object()) cls = report["cause"].value("class", cls);
  const auto id = report.contains("id") && report["id"].is_number_integer() ? report["id"].get<int64_t>() : 0;
  add_row("incidents", dump_row({{"host", host_}, {"job", job.job}, {"pod", job.pod}, {"container", job.container},
                                 {"incident_id", id}, {"state", report.value("online", std::string("open"))},
                                 {"class", cls}, {"ts_ns", static_cast<uint64_t>(realtime_ns())},
                                 {"report", dump_row(report)}}));
}

std::vector<std::pair<std::string, std::vector<std::string>>> ClickHouseSink::cut_locked(int64_t now, bool all) {
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  for (auto& [table, b] : buffers_) {
    while (b.rows.size() >= settings_.batch_rows) {
      std::vector<std::string> part(std::make_move_iterator(b.rows.begin()),
                                    std::make_move_iterator(b.rows.begin() + static_cast<long>(settings_.batch_rows)));
      b.rows.erase(b.rows.begin(), b.rows.begin() + static_cast<long>(settings_.batch_rows));
      out.emplace_back(table, std::move(part));
      b.first_ns = now;
    }
    if (!b.rows.empty() && (all || now - b.first_ns >= settings_.batch_interval_ns))
      out.emplace_back(table, std::exchange(b.rows, {}));
  }
  return out;
}

void ClickHouseSink::run() {
  int64_t next_offset = monotonic_ns() + 60'000'000'000;
  std::unique_lock lk(mu_);
  for (;;) {
    wake_.wait_for(lk, std::chrono::milliseconds(200), [&] {
      if (stopping_) return true;
      for (const auto& [t, b] : buffers_)
        if (b.rows.size() >= settings_.batch_rows) return true;
      return false;
    });
    const bool stop = stopping_;
    const int64_t now = monotonic_ns();
    if (!aggregates_.empty() && (stop || realtime_ns() >= interval_start_ns_ + settings_.aggregate_interval_ns)) {
      close_interval_locked(interval_start_ns_);
      interval_start_ns_ = 0;
    }
    auto batches = cut_locked(now, stop);
    lk.unlock();
    for (auto& [table, rows] : batches) {
      std::string payload;
      for (const auto& r : rows) (payload += r) += '\n';
      try {
        spool_->append(table, static_cast<uint32_t>(rows.size()), payload);
      } catch (const std::exception& e) {
        log_line(fmt::format("{} row(s) of {} lost: {}", rows.size(), table, e.what()));
        metrics_->dropped.Add({{"reason", "spool_error"}}).Increment(static_cast<double>(rows.size()));
        std::lock_guard g(mu_);
        stats_.dropped_rows += rows.size();
      }
    }
    if (now >= next_offset) {  // follows NTP's adjustments of the wall clock
      clock_offset_ns_.store(realtime_offset_ns(), std::memory_order_relaxed);
      next_offset = now + 60'000'000'000;
    }
    if (stop) {
      send_some(monotonic_ns() + kStopGraceNs);
      publish_stats();
      if (spool_->pending_batches())
        log_line(fmt::format("{} batch(es) wait in the spool for the next start", spool_->pending_batches()));
      return;
    }
    if (monotonic_ns() >= retry_at_ns_) send_some(monotonic_ns() + 1'000'000'000);
    publish_stats();
    lk.lock();
  }
}

// Sends spooled batches, oldest first, until none is left, one fails, or `deadline`. True when none failed.
bool ClickHouseSink::send_some(int64_t deadline) {
  auto fail = [&](const ClickHouseReply& reply) {
    metrics_->send_errors.Increment();
    backoff_ns_ = backoff_ns_ ? std::min(2 * backoff_ns_, kMaxBackoffNs) : 500'000'000;
    retry_at_ns_ = monotonic_ns() + backoff_ns_;
    std::lock_guard lk(mu_);
    if (stats_.last_error.empty())
      log_line(reply.describe() + fmt::format("; batches wait in the spool ({}) and are retried", spool_->pending_batches()));
    ++stats_.send_errors;
    stats_.last_error = reply.describe();
    return false;
  };
  while (monotonic_ns() < deadline) {
    auto batch = spool_->front();
    if (!batch) break;
    bool arrived = false;
    if (check_front_) {
      // Sent before, its answer lost (or sent by the run before a restart): already stored if its rows are there.
      const auto reply = http_->post(fmt::format("SELECT count() FROM {}.{} WHERE batch_id = {}",
                                                 clickhouse_identifier(settings_.database),
                                                 clickhouse_identifier(batch->table), clickhouse_string(batch->batch_id)));
      if (!reply.ok()) return fail(reply);
      arrived = std::strtoull(reply.body.c_str(), nullptr, 10) >= batch->rows;
      check_front_ = false;
    }
    if (!arrived) {
      const bool skip_unknown = ensure_added_columns(batch->table) == ColumnsState::absent;
      const auto reply = http_->insert_json_rows(settings_.database, batch->table,
                                                 with_batch_key(batch->payload, batch->batch_id), skip_unknown);
      if (!reply.ok()) {
        check_front_ = reply.maybe_reached;
        return fail(reply);
      }
    }
    spool_->pop_front();
    probe_clock();
    metrics_->batches.Add({{"table", batch->table}}).Increment();
    metrics_->rows.Add({{"table", batch->table}}).Increment(batch->rows);
    backoff_ns_ = 0;
    std::lock_guard lk(mu_);
    if (!stats_.last_error.empty()) log_line("sending again: ClickHouse acknowledged a batch");
    stats_.last_error.clear();
    ++stats_.batches_sent;
    stats_.rows_sent += batch->rows;
  }
  return true;
}

// The sending thread's only. Unknown while the table cannot be inspected (ClickHouse down, the table not made yet):
// asked again before the next insert.
ClickHouseSink::ColumnsState ClickHouseSink::ensure_added_columns(const std::string& table) {
  ColumnsState& state = added_columns_[table];
  if (state != ColumnsState::unknown) return state;
  const std::string db = clickhouse_string(settings_.database), name = clickhouse_string(table);
  const auto columns = http_->post(fmt::format(
      "SELECT name FROM system.columns WHERE database = {} AND table = {} FORMAT TabSeparated", db, name));
  if (!columns.ok()) return state;
  const std::vector<std::string> have = answer_lines(columns.body);
  if (have.empty()) return state;  // no such table yet
  std::vector<const AddedColumn*> missing;
  for (const AddedColumn& c : kAddedColumns)
    if (c.table == table && std::find(have.begin(), have.end(), c.name) == have.end()) missing.push_back(&c);
  if (missing.empty()) return state = ColumnsState::present;
  const auto engine = http_->post(fmt::format(
      "SELECT engine FROM system.tables WHERE database = {} AND name = {} FORMAT TabSeparated", db, name));
  const std::vector<std::string> engines = engine.ok() ? answer_lines(engine.body) : std::vector<std::string>{};
  const bool local = !engines.empty() && engines[0].ends_with("MergeTree");
  for (const AddedColumn* c : missing) {
    const std::string alter = fmt::format("ALTER TABLE {}.{} ADD COLUMN {} {}", clickhouse_identifier(settings_.database),
                                          clickhouse_identifier(table), c->name, c->definition);
    if (!local) {
      log_line(fmt::format("table {} ({}) lacks column {}: its rows are sent without it until it is added (on a "
                           "cluster: {}_local and {} ON CLUSTER, deploy/clickhouse/cluster.sql)",
                           table, engines.empty() ? "engine unknown" : engines[0], c->name, table, table));
      return state = ColumnsState::absent;
    }
    const auto reply = http_->post(alter);
    // Another agent may have added it a moment before.
    if (!reply.ok() && reply.body.find("already exists") == std::string::npos) {
      log_line(fmt::format("cannot add column {} to {}: {}; its rows are sent without it until '{}' is run", c->name,
                           table, reply.describe(), alter));
      return state = ColumnsState::absent;
    }
    log_line(fmt::format("added column {} to table {} (schema of an earlier stackscope)", c->name, table));
  }
  return state = ColumnsState::present;
}

// NTP-style over one round trip (schema.sql, clock_offsets), at most once a second and only while ClickHouse answers
// (after an acknowledged batch). Where the table does not exist (a store made before it) nothing is probed: its rows
// would block the spool; asked again every minute.
void ClickHouseSink::probe_clock() {
  const int64_t now = monotonic_ns();
  if (now < next_clock_probe_ns_) return;
  next_clock_probe_ns_ = now + 1'000'000'000;
  if (clock_table_ != 1) {
    const auto reply = http_->post(fmt::format("SELECT count() FROM system.tables WHERE database = {} AND name = "
                                               "'clock_offsets'", clickhouse_string(settings_.database)));
    if (!reply.ok()) return;
    const int found = std::strtoll(reply.body.c_str(), nullptr, 10) > 0;
    if (!found && clock_table_ != 0)
      log_line("no clock_offsets table (a store made before it: deploy/clickhouse/schema.sql): this host's clock "
               "offset is not measured");
    clock_table_ = found;
    if (!found) {
      next_clock_probe_ns_ = now + 60'000'000'000;
      return;
    }
  }
  const int64_t t0 = realtime_ns();
  const auto reply = http_->post("SELECT toUInt32(now())");
  const int64_t t1 = realtime_ns();
  const long long server_s = std::strtoll(reply.body.c_str(), nullptr, 10);
  if (!reply.ok() || server_s <= 0) return;
  const int64_t mid = t0 + (t1 - t0) / 2;
  // now() truncates to the second: its middle is the unbiased guess.
  const int64_t offset = server_s * 1'000'000'000LL + 500'000'000 - mid;
  add_row("clock_offsets", dump_row({{"host", host_}, {"ts_ns", static_cast<uint64_t>(mid)},
                                     {"server_s", static_cast<uint32_t>(server_s)},
                                     {"rtt_ns", static_cast<uint64_t>(std::max<int64_t>(0, t1 - t0))},
                                     {"offset_ns", offset}}));
}

void ClickHouseSink::publish_stats() {
  const uint64_t spool_dropped = spool_->dropped_rows();
  if (spool_dropped > metrics_->spool_dropped_rows) {
    metrics_->dropped.Add({{"reason", "spool_full"}})
        .Increment(static_cast<double>(spool_dropped - metrics_->spool_dropped_rows));
    std::lock_guard lk(mu_);
    stats_.dropped_rows += spool_dropped - metrics_->spool_dropped_rows;
    metrics_->spool_dropped_rows = spool_dropped;
  }
  metrics_->bytes.Set(static_cast<double>(spool_->bytes()));
  metrics_->pending.Set(static_cast<double>(spool_->pending_batches()));
  const int64_t oldest = spool_->oldest_created_unix_ns();
  metrics_->age.Set(oldest ? std::max(0.0, static_cast<double>(realtime_ns() - oldest) * 1e-9) : 0.0);
  std::lock_guard lk(mu_);
  stats_.spool_batches = spool_->pending_batches();
  stats_.spool_bytes = spool_->bytes();
}

ClickHouseSink::Stats ClickHouseSink::stats() const {
  std::lock_guard lk(mu_);
  return stats_;
}

}  // namespace stackscope::agent
