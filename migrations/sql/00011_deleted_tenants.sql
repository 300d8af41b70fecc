-- +goose Up
-- A deleted tenant leaves a tombstone. DELETE /v1/tenants/{tid} removes the
-- tenants row (its quotas, credentials and topic rules go with it, ON DELETE
-- CASCADE) and, in the same transaction, inserts its id here, then NOTIFY
-- berth_tenants_deleted '<tenant id>' (and berth_placement for gateways).
--
-- Usage rows (usage, usage_drops, usage_credentials, latency, spans and their
-- rollups) have no foreign key to tenants and outlive the tenant: a node's
-- last flush of a deleted tenant lands after the row is gone. The tombstone
-- keeps them attributed: the account's usage (GET /v1/usage) sums the tenants
-- an account has and those it deleted. Nodes read it to tell a deleted tenant
-- from one that moved, and to find the data directories of tenants deleted
-- while they were down or not listening. Kept as long as the account.
CREATE TABLE deleted_tenants (
    id         text PRIMARY KEY,
    account_id text NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    slug       text NOT NULL,
    created_at timestamptz NOT NULL,
    deleted_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX deleted_tenants_account ON deleted_tenants (account_id);

-- +goose Down
DROP TABLE deleted_tenants;
