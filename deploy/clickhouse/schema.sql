-- stackscope's fleet store on one ClickHouse server (18.16, Debian 12's, and later). The agent
-- ([clickhouse] in deploy/agent.toml) inserts into these tables over the HTTP interface; the tests run this file.
-- Create the database, then the tables in it:
--   clickhouse-client --query 'CREATE DATABASE IF NOT EXISTS stackscope'
--   clickhouse-client --database stackscope --multiquery < deploy/clickhouse/schema.sql
-- For a cluster (shards, replicas) see cluster.sql.
--
-- Every row carries the id of the agent's batch it came in (batch_id: the agent's spool id and the batch's
-- sequence number) and its index in that batch. A batch whose acknowledgement was lost is sent again; the
-- sorting keys end with (batch_id, row_index), so ReplacingMergeTree keeps one copy of such a row when parts
-- merge. Until then a copy may be visible: count exactly with FINAL, e.g.
--   SELECT count() FROM samples FINAL WHERE host = 'node1'
-- (the agent asks before resending a batch that may have arrived, so copies are rare).
-- Times are Unix nanoseconds (ts_ns, interval_start_ns); `time` (seconds) partitions by month.
--
-- Upgrading tables made by an earlier stackscope: columns added since (samples.kind, event_aggregates.wait_ns) are
-- added by the agent before its first insert (it asks system.columns, then ALTER TABLE ... ADD COLUMN: 18.16 has no
-- ADD COLUMN IF NOT EXISTS). By hand, once per table (an error "already exists" means it was done):
--   ALTER TABLE samples ADD COLUMN kind String DEFAULT '' AFTER value
--   ALTER TABLE event_aggregates ADD COLUMN wait_ns UInt64 DEFAULT 0 AFTER duration_ns

CREATE TABLE IF NOT EXISTS samples (
    host String,          -- the node
    job String,           -- '' for the node's own series
    series String,        -- 'cpu.time.user', 'gpu.util.sm', ... (docs/FEATURES.md)
    device String,        -- 'cpu3', 'eth0', 'gpu0', '' ...
    unit String,
    ts_ns UInt64,
    value Float64,
    kind String DEFAULT '', -- gauge, counter (cumulative: analysed as a rate), static_value; '' in rows of agents
                            -- before this column (the reader then guesses from the values)
    batch_id String,
    row_index UInt32,
    time DateTime MATERIALIZED toDateTime(intDiv(ts_ns, 1000000000))
) ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(time)
ORDER BY (host, job, series, device, ts_ns, batch_id, row_index);

-- A traced job's calls per rank and layer over one interval (clickhouse.aggregate_interval): how many, their
-- host-observed time, and the part of it spent waiting (wait_ns: CUDA *Synchronize calls, where a rank's host waits
-- for its GPU and, through the collectives on it, for the slowest rank; what the fleet's straggler verdict compares).
-- Several rows of one (host, job, rank, layer, interval_start_ns) add up. Intervals start at multiples of the
-- interval in Unix time, so the hosts' intervals line up.
CREATE TABLE IF NOT EXISTS event_aggregates (
    host String,
    job String,
    pod String,
    container String,
    rank String,
    layer String,         -- cuda, nccl, torch, python, kernel
    interval_start_ns UInt64,
    interval_ns UInt64,
    events UInt64,
    duration_ns UInt64,
    wait_ns UInt64 DEFAULT 0,
    batch_id String,
    row_index UInt32,
    time DateTime MATERIALIZED toDateTime(intDiv(interval_start_ns, 1000000000))
) ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(time)
ORDER BY (host, job, interval_start_ns, rank, layer, batch_id, row_index);

-- The online incident engine's reports: one row each time an incident opens, changes its cause, or closes
-- (state), with the whole report (docs/INCIDENTS.md) as JSON.
CREATE TABLE IF NOT EXISTS incidents (
    host String,
    job String,
    pod String,
    container String,
    incident_id Int64,
    state String,         -- open, cause, close
    class String,         -- root-cause class at that moment
    ts_ns UInt64,         -- when the agent read the report
    report String,
    batch_id String,
    row_index UInt32,
    time DateTime MATERIALIZED toDateTime(intDiv(ts_ns, 1000000000))
) ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(time)
ORDER BY (host, job, incident_id, ts_ns, batch_id, row_index);

-- Each agent's clock against the ClickHouse server's, measured about once a second while it sends (NTP-style over
-- the HTTP round trip): server_s is the server's now() (whole seconds: 18.16 has no sub-second clock), ts_ns the
-- agent's Unix time halfway through the round trip, offset_ns = server_s + 0.5 s - ts_ns. One probe is only good to
-- half a second; the agents' probes fall at every phase of the server's second, so the mean of many is good to
-- about 0.29 s / sqrt(probes) plus half the round trip. The fleet analysis shifts each host's times by its mean.
CREATE TABLE IF NOT EXISTS clock_offsets (
    host String,
    ts_ns UInt64,
    server_s UInt32,
    rtt_ns UInt64,
    offset_ns Int64,
    batch_id String,
    row_index UInt32,
    time DateTime MATERIALIZED toDateTime(intDiv(ts_ns, 1000000000))
) ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(time)
ORDER BY (host, ts_ns, batch_id, row_index);
