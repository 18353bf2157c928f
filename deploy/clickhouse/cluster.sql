-- stackscope's fleet store on a ClickHouse cluster (documented, not tested: the tests run schema.sql on one server).
-- ClickHouse does the distribution: each table is a ReplicatedReplacingMergeTree on every server (replicated
-- through ZooKeeper) and a Distributed table of the same name over them, which the agents insert into and
-- queries read. Needs a cluster in the servers' <remote_servers> (named stackscope_cluster here: replace it),
-- the macros {shard} and {replica} in each server's config, and ZooKeeper for replication and ON CLUSTER DDL.
--   clickhouse-client --query "CREATE DATABASE IF NOT EXISTS stackscope ON CLUSTER stackscope_cluster"
--   clickhouse-client --database stackscope --multiquery < deploy/clickhouse/cluster.sql
--
-- Rows are sharded by host: all of one agent's batches land on one shard, so a batch sent twice meets its first
-- copy there and ReplacingMergeTree keeps one (query with FINAL for exact counts). Replicated tables also drop
-- an identical block inserted twice (insert_deduplicate, on by default). Inserts into a Distributed table are
-- forwarded asynchronously: the agent's check whether a batch already arrived may miss one still queued and send
-- it again, which the sorting key absorbs. Set insert_distributed_sync = 1 in the agents' ClickHouse user profile
-- to have each insert acknowledged only once the shard stored it.
-- Columns and keys are those of schema.sql.
--
-- Upgrading a cluster made by an earlier stackscope: the agent does not alter Distributed tables (it logs what is
-- missing and sends its rows without those columns until they exist). Add them to the shards' tables, then to the
-- Distributed ones:
--   ALTER TABLE samples_local ON CLUSTER stackscope_cluster ADD COLUMN kind String DEFAULT '' AFTER value
--   ALTER TABLE samples ON CLUSTER stackscope_cluster ADD COLUMN kind String DEFAULT '' AFTER value
--   ALTER TABLE event_aggregates_local ON CLUSTER stackscope_cluster ADD COLUMN wait_ns UInt64 DEFAULT 0 AFTER duration_ns
--   ALTER TABLE event_aggregates ON CLUSTER stackscope_cluster ADD COLUMN wait_ns UInt64 DEFAULT 0 AFTER duration_ns

CREATE TABLE IF NOT EXISTS samples_local ON CLUSTER stackscope_cluster (
    host String, job String, series String, device String, unit String, ts_ns UInt64, value Float64,
    kind String DEFAULT '', batch_id String, row_index UInt32,
    time DateTime MATERIALIZED toDateTime(intDiv(ts_ns, 1000000000))
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/stackscope/samples', '{replica}')
PARTITION BY toYYYYMM(time)
ORDER BY (host, job, series, device, ts_ns, batch_id, row_index);

CREATE TABLE IF NOT EXISTS samples ON CLUSTER stackscope_cluster AS samples_local
ENGINE = Distributed(stackscope_cluster, stackscope, samples_local, cityHash64(host));

CREATE TABLE IF NOT EXISTS event_aggregates_local ON CLUSTER stackscope_cluster (
    host String, job String, pod String, container String, rank String, layer String,
    interval_start_ns UInt64, interval_ns UInt64, events UInt64, duration_ns UInt64, wait_ns UInt64 DEFAULT 0,
    batch_id String, row_index UInt32,
    time DateTime MATERIALIZED toDateTime(intDiv(interval_start_ns, 1000000000))
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/stackscope/event_aggregates', '{replica}')
PARTITION BY toYYYYMM(time)
ORDER BY (host, job, interval_start_ns, rank, layer, batch_id, row_index);

CREATE TABLE IF NOT EXISTS event_aggregates ON CLUSTER stackscope_cluster AS event_aggregates_local
ENGINE = Distributed(stackscope_cluster, stackscope, event_aggregates_local, cityHash64(host));

CREATE TABLE IF NOT EXISTS incidents_local ON CLUSTER stackscope_cluster (
    host String, job String, pod String, container String, incident_id Int64, state String, class String,
    ts_ns UInt64, report String, batch_id String, row_index UInt32,
    time DateTime MATERIALIZED toDateTime(intDiv(ts_ns, 1000000000))
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/stackscope/incidents', '{replica}')
PARTITION BY toYYYYMM(time)
ORDER BY (host, job, incident_id, ts_ns, batch_id, row_index);

CREATE TABLE IF NOT EXISTS incidents ON CLUSTER stackscope_cluster AS incidents_local
ENGINE = Distributed(stackscope_cluster, stackscope, incidents_local, cityHash64(host));

CREATE TABLE IF NOT EXISTS clock_offsets_local ON CLUSTER stackscope_cluster (
    host String, ts_ns UInt64, server_s UInt32, rtt_ns UInt64, offset_ns Int64, batch_id String, row_index UInt32,
    time DateTime MATERIALIZED toDateTime(intDiv(ts_ns, 1000000000))
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/stackscope/clock_offsets', '{replica}')
PARTITION BY toYYYYMM(time)
ORDER BY (host, ts_ns, batch_id, row_index);

CREATE TABLE IF NOT EXISTS clock_offsets ON CLUSTER stackscope_cluster AS clock_offsets_local
ENGINE = Distributed(stackscope_cluster, stackscope, clock_offsets_local, cityHash64(host));
