-- +goose Up
-- Sampled trace spans kept per tenant for the dashboard's latency views.
-- Ids are OpenTelemetry's lowercase hex (trace 32, span 16 characters); a root
-- span has no parent. No foreign key to tenants: like usage, spans may land
-- after their tenant is gone and are kept for the record.
CREATE TABLE spans (
    tenant_id      text NOT NULL,
    trace_id       text NOT NULL CHECK (trace_id ~ '^[0-9a-f]{32}$'),
    span_id        text NOT NULL CHECK (span_id ~ '^[0-9a-f]{16}$'),
    parent_span_id text CHECK (parent_span_id ~ '^[0-9a-f]{16}$'),
    name           text NOT NULL,
    start          timestamptz NOT NULL,
    duration_ns    bigint NOT NULL CHECK (duration_ns >= 0),
    attributes     jsonb NOT NULL DEFAULT '{}',
    PRIMARY KEY (tenant_id, trace_id, span_id)
);
CREATE INDEX spans_tenant_start ON spans (tenant_id, start DESC);

-- +goose Down
DROP TABLE spans;
