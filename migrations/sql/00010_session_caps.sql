-- +goose Up
-- Two more live quotas, enforced by the tenant's node (NOTIFY berth_quotas):
-- max_sessions bounds the sessions the tenant's shard holds (connected ones
-- plus offline persistent ones; a CONNECT that would create one more gets
-- CONNACK 0x97, 3.1.1 return code 3), and max_session_expiry (seconds) caps a
-- session's expiry interval, MQTT 3.1.1 clean-session-0 sessions included.
-- Existing tenants get their plan's defaults (billing/plan); the column
-- defaults are the free plan's, for rows written by a client that does not
-- name them (the API always does).
ALTER TABLE quotas
    ADD COLUMN max_sessions       integer NOT NULL DEFAULT 100,
    ADD COLUMN max_session_expiry bigint  NOT NULL DEFAULT 86400;

UPDATE quotas q
SET max_sessions = CASE t.plan WHEN 'pro' THEN 10000 WHEN 'business' THEN 100000 ELSE 100 END,
    max_session_expiry = CASE t.plan WHEN 'pro' THEN 604800 WHEN 'business' THEN 1209600 ELSE 86400 END
FROM tenants t
WHERE t.id = q.tenant_id;

-- +goose Down
ALTER TABLE quotas
    DROP COLUMN max_session_expiry,
    DROP COLUMN max_sessions;
