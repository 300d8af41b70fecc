-- +goose Up
-- Placement kept fresh (issue #17, docs/replication.md, "Placement in
-- Postgres"): the leader records the tenant's replicas on every committed
-- configuration change, not only when it is elected. config_index is the
-- Raft log index of the configuration the row describes; within one epoch
-- (the same leader) a write lands only when its config_index is above the
-- stored one, so a late write of an older configuration never undoes a
-- newer one. Rows written before this migration have 0.
ALTER TABLE tenant_placement
    ADD COLUMN config_index bigint NOT NULL DEFAULT 0 CHECK (config_index >= 0);

-- +goose Down
ALTER TABLE tenant_placement DROP COLUMN config_index;
