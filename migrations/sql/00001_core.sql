-- +goose Up
-- Core tables of the control plane. Ids are opaque text chosen by the application
-- (prefixed, e.g. "ten_..."), so they can travel in JWT claims and URLs unchanged.

CREATE TABLE accounts (
    id            text PRIMARY KEY,
    email         text NOT NULL,
    password_hash text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX accounts_email_key ON accounts (lower(email));

CREATE TABLE api_keys (
    id           text PRIMARY KEY,
    account_id   text NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    name         text NOT NULL DEFAULT '',
    secret_hash  bytea NOT NULL UNIQUE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz
);
CREATE INDEX api_keys_account ON api_keys (account_id);

-- Broker nodes register themselves and heartbeat; placement picks the least
-- loaded live node for a new tenant.
CREATE TABLE nodes (
    id           text PRIMARY KEY,
    mqtt_addr    text NOT NULL,
    admin_addr   text NOT NULL,
    capacity     integer NOT NULL CHECK (capacity > 0),
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    draining     boolean NOT NULL DEFAULT false
);

CREATE TABLE tenants (
    id         text PRIMARY KEY,
    account_id text NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    -- A DNS label: the tenant endpoint is <slug>.<domain>.
    slug       text NOT NULL UNIQUE
               CHECK (slug ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$'),
    plan       text NOT NULL,
    node_id    text REFERENCES nodes (id) ON DELETE SET NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX tenants_account ON tenants (account_id);
CREATE INDEX tenants_node ON tenants (node_id);

-- Live quotas per tenant, within the bounds of the tenant's plan. A change is
-- announced with NOTIFY berth_quotas so nodes apply it without reconnecting anyone.
CREATE TABLE quotas (
    tenant_id                 text PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
    max_connections           integer NOT NULL,
    max_msgs_per_sec          integer NOT NULL,
    max_bytes_per_sec         bigint  NOT NULL,
    client_msgs_per_sec       integer NOT NULL,
    client_bytes_per_sec      bigint  NOT NULL,
    max_message_size          integer NOT NULL,
    max_subscriptions         integer NOT NULL,
    max_retained_messages     integer NOT NULL,
    max_retained_bytes        bigint  NOT NULL,
    retention_seconds         bigint  NOT NULL,
    retention_bytes           bigint  NOT NULL,
    max_inflight              integer NOT NULL,
    max_queued_bytes          bigint  NOT NULL,
    monthly_messages          bigint  NOT NULL,
    updated_at                timestamptz NOT NULL DEFAULT now()
);

-- Device credentials: the id is the MQTT username, the password a signed JWT.
CREATE TABLE credentials (
    id         text PRIMARY KEY,
    tenant_id  text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name       text NOT NULL,
    acl        jsonb NOT NULL,
    expires_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);
CREATE INDEX credentials_tenant ON credentials (tenant_id);

CREATE TABLE topic_rules (
    id                text PRIMARY KEY,
    tenant_id         text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    filter            text NOT NULL,
    retention_seconds bigint,
    retained_allowed  boolean NOT NULL DEFAULT true,
    max_message_size  integer,
    created_at        timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, filter)
);

-- Usage: per tenant, node and minute. Nodes send deltas tagged (node_id, seq);
-- usage_flushes makes a retried flush a no-op, so nothing is counted twice.
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
);

CREATE TABLE usage_drops (
    tenant_id text NOT NULL,
    node_id   text NOT NULL,
    bucket    timestamptz NOT NULL,
    reason    text NOT NULL,
    count     bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, bucket, node_id, reason)
);

CREATE TABLE usage_flushes (
    node_id    text NOT NULL,
    seq        bigint NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (node_id, seq)
);

-- +goose Down
DROP TABLE usage_flushes, usage_drops, usage, topic_rules, credentials, quotas, tenants, nodes, api_keys, accounts;
