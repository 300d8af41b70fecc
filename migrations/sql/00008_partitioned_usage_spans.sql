-- +goose Up
-- Data lifecycle: spans, minute usage (usage, usage_drops) and minute latency
-- live in tables partitioned by UTC day, so retention drops whole partitions
-- and never runs a mass DELETE. Each table T has partitions T_pYYYYMMDD for
-- [day, day + 1) and a default partition T_default that catches any row
-- outside the days created (a write never fails; the API's lifecycle moves
-- such rows into their day's partition when it creates it). The API's
-- lifecycle (services/internal/lifecycle) creates the coming days'
-- partitions, rolls minute usage and latency up into the hourly and daily
-- tables below, and drops partitions older than the retention (spans 7 days,
-- minute usage and latency 35 days by default), one process at a time under
-- an advisory lock. A primary key of a partitioned table must include the
-- partition column: spans' key gains start; the others already had bucket.
--
-- Existing rows move into the new tables: a partition is made for each day
-- that has rows, and for today and the next two days.

ALTER TABLE usage RENAME TO usage_unpartitioned;
ALTER TABLE usage_unpartitioned RENAME CONSTRAINT usage_pkey TO usage_unpartitioned_pkey;
ALTER TABLE usage_drops RENAME TO usage_drops_unpartitioned;
ALTER TABLE usage_drops_unpartitioned RENAME CONSTRAINT usage_drops_pkey TO usage_drops_unpartitioned_pkey;
ALTER TABLE latency RENAME TO latency_unpartitioned;
ALTER TABLE latency_unpartitioned RENAME CONSTRAINT latency_pkey TO latency_unpartitioned_pkey;
ALTER TABLE spans RENAME TO spans_unpartitioned;
ALTER TABLE spans_unpartitioned RENAME CONSTRAINT spans_pkey TO spans_unpartitioned_pkey;
ALTER INDEX spans_tenant_start RENAME TO spans_unpartitioned_tenant_start;

-- Usage: per tenant, node and minute (see 00001_core.sql).
CREATE TABLE usage (
    tenant_id          text NOT NULL,
    node_id            text NOT NULL,
    bucket             timestamptz NOT NULL,
    messages_in        bigint NOT NULL DEFAULT 0,
    messages_out       bigint NOT NULL DEFAULT 0,
    bytes_in           bigint NOT NULL DEFAULT 0,
    bytes_out          bigint NOT NULL DEFAULT 0,
    connection_seconds bigint NOT NULL DEFAULT 0,
    stored_bytes       bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, bucket, node_id)
) PARTITION BY RANGE (bucket);

CREATE TABLE usage_drops (
    tenant_id text NOT NULL,
    node_id   text NOT NULL,
    bucket    timestamptz NOT NULL,
    reason    text NOT NULL,
    count     bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, bucket, node_id, reason)
) PARTITION BY RANGE (bucket);

-- Latency histograms per tenant, node, minute and metric (see 00005_latency.sql).
CREATE TABLE latency (
    tenant_id text NOT NULL,
    node_id   text NOT NULL,
    bucket    timestamptz NOT NULL,
    metric    text NOT NULL CHECK (metric IN ('delivery', 'ack', 'connect')),
    count     bigint NOT NULL,
    sum_ns    bigint NOT NULL,
    min_ns    bigint NOT NULL,
    max_ns    bigint NOT NULL,
    bounds    bigint[] NOT NULL,
    counts    bigint[] NOT NULL,
    CHECK (cardinality(bounds) = cardinality(counts)),
    PRIMARY KEY (tenant_id, metric, bucket, node_id)
) PARTITION BY RANGE (bucket);

-- Sampled spans (see 00003_spans.sql). A span id is unique within its trace;
-- start is in the key because the partition column must be.
CREATE TABLE spans (
    tenant_id      text NOT NULL,
    trace_id       text NOT NULL CHECK (trace_id ~ '^[0-9a-f]{32}$'),
    span_id        text NOT NULL CHECK (span_id ~ '^[0-9a-f]{16}$'),
    parent_span_id text CHECK (parent_span_id ~ '^[0-9a-f]{16}$'),
    name           text NOT NULL,
    start          timestamptz NOT NULL,
    duration_ns    bigint NOT NULL CHECK (duration_ns >= 0),
    attributes     jsonb NOT NULL DEFAULT '{}',
    PRIMARY KEY (tenant_id, trace_id, span_id, start)
) PARTITION BY RANGE (start);
CREATE INDEX spans_tenant_start ON spans (tenant_id, start DESC);

-- +goose StatementBegin
DO $$
DECLARE
    t record;
    d date;
BEGIN
    FOR t IN SELECT * FROM (VALUES ('usage', 'bucket'), ('usage_drops', 'bucket'),
                                   ('latency', 'bucket'), ('spans', 'start')) AS v(name, col) LOOP
        EXECUTE format('CREATE TABLE %I PARTITION OF %I DEFAULT', t.name || '_default', t.name);
        FOR d IN EXECUTE format(
            'SELECT DISTINCT (%I AT TIME ZONE ''UTC'')::date FROM %I
             UNION SELECT (now() AT TIME ZONE ''UTC'')::date + i FROM generate_series(0, 2) AS i',
            t.col, t.name || '_unpartitioned') LOOP
            EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
                t.name || '_p' || to_char(d, 'YYYYMMDD'), t.name,
                d::timestamp AT TIME ZONE 'UTC', (d + 1)::timestamp AT TIME ZONE 'UTC');
        END LOOP;
        EXECUTE format('INSERT INTO %I SELECT * FROM %I', t.name, t.name || '_unpartitioned');
        EXECUTE format('DROP TABLE %I', t.name || '_unpartitioned');
    END LOOP;
END
$$;
-- +goose StatementEnd

-- Rollups, kept after the minute rows are dropped. Each row is recomputed
-- from the minute rows of its hour or day (never added to), so rolling up
-- again is harmless. Counters are sums over nodes and minutes; stored_bytes
-- is the largest per-minute total over the tenant's nodes within the hour or
-- day (a level, as in the API's series).
CREATE TABLE usage_hourly (
    tenant_id          text NOT NULL,
    hour               timestamptz NOT NULL CHECK (date_trunc('hour', hour, 'UTC') = hour),
    messages_in        bigint NOT NULL,
    messages_out       bigint NOT NULL,
    bytes_in           bigint NOT NULL,
    bytes_out          bigint NOT NULL,
    connection_seconds bigint NOT NULL,
    stored_bytes       bigint NOT NULL,
    PRIMARY KEY (tenant_id, hour)
);

CREATE TABLE usage_daily (
    tenant_id          text NOT NULL,
    day                timestamptz NOT NULL CHECK (date_trunc('day', day, 'UTC') = day),
    messages_in        bigint NOT NULL,
    messages_out       bigint NOT NULL,
    bytes_in           bigint NOT NULL,
    bytes_out          bigint NOT NULL,
    connection_seconds bigint NOT NULL,
    stored_bytes       bigint NOT NULL,
    PRIMARY KEY (tenant_id, day)
);

CREATE TABLE usage_drops_hourly (
    tenant_id text NOT NULL,
    hour      timestamptz NOT NULL CHECK (date_trunc('hour', hour, 'UTC') = hour),
    reason    text NOT NULL,
    count     bigint NOT NULL,
    PRIMARY KEY (tenant_id, hour, reason)
);

CREATE TABLE usage_drops_daily (
    tenant_id text NOT NULL,
    day       timestamptz NOT NULL CHECK (date_trunc('day', day, 'UTC') = day),
    reason    text NOT NULL,
    count     bigint NOT NULL,
    PRIMARY KEY (tenant_id, day, reason)
);

-- Latency histograms merged over nodes and the minutes of an hour (counts
-- added bound by bound, as the API merges them).
CREATE TABLE latency_hourly (
    tenant_id text NOT NULL,
    metric    text NOT NULL CHECK (metric IN ('delivery', 'ack', 'connect')),
    hour      timestamptz NOT NULL CHECK (date_trunc('hour', hour, 'UTC') = hour),
    count     bigint NOT NULL,
    sum_ns    bigint NOT NULL,
    min_ns    bigint NOT NULL,
    max_ns    bigint NOT NULL,
    bounds    bigint[] NOT NULL,
    counts    bigint[] NOT NULL,
    CHECK (cardinality(bounds) = cardinality(counts)),
    PRIMARY KEY (tenant_id, metric, hour)
);

-- rollup_days: UTC days whose hourly and daily rollups (usage, usage_drops,
-- latency) were computed after the day had ended. A minute partition is
-- dropped only when its day is here.
CREATE TABLE rollup_days (
    day       date PRIMARY KEY,
    rolled_at timestamptz NOT NULL
);

-- retention: per partitioned table, the time before which its rows have
-- been dropped (kept_from, a UTC midnight). Readers of usage, usage_drops
-- and latency answer from the rollups before it.
CREATE TABLE retention (
    table_name text PRIMARY KEY CHECK (table_name IN ('usage', 'usage_drops', 'latency', 'spans')),
    kept_from  timestamptz NOT NULL
);

-- +goose Down
DROP TABLE retention, rollup_days, latency_hourly, usage_drops_daily, usage_drops_hourly, usage_daily, usage_hourly;

ALTER TABLE usage RENAME TO usage_partitioned;
ALTER TABLE usage_partitioned RENAME CONSTRAINT usage_pkey TO usage_partitioned_pkey;
CREATE TABLE usage (LIKE usage_partitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS, PRIMARY KEY (tenant_id, bucket, node_id));
INSERT INTO usage SELECT * FROM usage_partitioned;
DROP TABLE usage_partitioned;

ALTER TABLE usage_drops RENAME TO usage_drops_partitioned;
ALTER TABLE usage_drops_partitioned RENAME CONSTRAINT usage_drops_pkey TO usage_drops_partitioned_pkey;
CREATE TABLE usage_drops (LIKE usage_drops_partitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS, PRIMARY KEY (tenant_id, bucket, node_id, reason));
INSERT INTO usage_drops SELECT * FROM usage_drops_partitioned;
DROP TABLE usage_drops_partitioned;

ALTER TABLE latency RENAME TO latency_partitioned;
ALTER TABLE latency_partitioned RENAME CONSTRAINT latency_pkey TO latency_partitioned_pkey;
CREATE TABLE latency (LIKE latency_partitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS, PRIMARY KEY (tenant_id, metric, bucket, node_id));
INSERT INTO latency SELECT * FROM latency_partitioned;
DROP TABLE latency_partitioned;

ALTER TABLE spans RENAME TO spans_partitioned;
ALTER TABLE spans_partitioned RENAME CONSTRAINT spans_pkey TO spans_partitioned_pkey;
ALTER INDEX spans_tenant_start RENAME TO spans_partitioned_tenant_start;
CREATE TABLE spans (LIKE spans_partitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS, PRIMARY KEY (tenant_id, trace_id, span_id));
CREATE INDEX spans_tenant_start ON spans (tenant_id, start DESC);
INSERT INTO spans SELECT * FROM spans_partitioned ON CONFLICT DO NOTHING;
DROP TABLE spans_partitioned;
