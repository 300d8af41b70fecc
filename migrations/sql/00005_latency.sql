-- +goose Up
-- latency: per tenant, per node, per minute, one row per metric ('delivery',
-- 'ack', 'connect'), the histogram of every sample the node recorded in that
-- minute (nanoseconds). The histogram is the broker's log-linear layout
-- (precision 7: a bucket is at most 1/64 of its values wide), stored sparse:
-- bounds[i] is the largest value bucket i holds (9223372036854775807 for the
-- bucket of values past the layout's range) and counts[i] its count, bounds
-- ascending, empty buckets left out. Histograms merge by adding the counts of
-- equal bounds, across nodes and minutes; percentiles are read off the merged
-- counts, never averaged. Rows are written in the same transaction as the
-- usage deltas of the same flush (usage_flushes makes a retry a no-op).
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
);

-- +goose Down
DROP TABLE latency;
