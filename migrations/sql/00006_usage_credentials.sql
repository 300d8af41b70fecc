-- +goose Up
-- usage_credentials: what each credential's connections did, per tenant, node
-- and UTC hour (messages and bytes in and out, as the usage meters count them),
-- so that a customer can see which device fleet costs what. Nodes write it in
-- the same transaction as the usage deltas of the same flush (usage_flushes
-- makes a retry a no-op), adding to the hour's row. HTTP publish and refused
-- connections belong to no credential: the sum over credentials can be less
-- than the tenant's usage. No foreign key: usage outlives a deleted credential.
CREATE TABLE usage_credentials (
    tenant_id     text NOT NULL,
    credential_id text NOT NULL,
    node_id       text NOT NULL,
    hour          timestamptz NOT NULL CHECK (date_trunc('hour', hour, 'UTC') = hour),
    messages_in   bigint NOT NULL DEFAULT 0,
    messages_out  bigint NOT NULL DEFAULT 0,
    bytes_in      bigint NOT NULL DEFAULT 0,
    bytes_out     bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, hour, credential_id, node_id)
);

-- +goose Down
DROP TABLE usage_credentials;
