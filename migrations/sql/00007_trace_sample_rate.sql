-- +goose Up
-- The share of a tenant's messages whose path through the node is traced
-- (spans mqtt.publish and its children), besides every message whose W3C
-- traceparent says sampled; nodes cap both together per tenant per second.
-- Changed with PATCH /v1/tenants/{tid}, announced on berth_quotas so nodes
-- apply it live.
ALTER TABLE tenants ADD COLUMN trace_sample_rate double precision NOT NULL DEFAULT 0.001
    CHECK (trace_sample_rate >= 0 AND trace_sample_rate <= 1);

-- +goose Down
ALTER TABLE tenants DROP COLUMN trace_sample_rate;
