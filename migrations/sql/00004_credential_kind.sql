-- +goose Up
-- A credential's kind: 'device' (POST .../credentials) or 'inspector', the
-- dashboard's in-browser MQTT client (POST .../inspector-token). A tenant has
-- at most one live inspector credential, reused by every mint: each mint signs
-- a fresh short-lived token for it and records that token's acl, exp
-- (expires_at) and kid on the row, so the JWKS keeps the key published exactly
-- as long as the newest token lives. Revoking it works as for a device (NOTIFY
-- berth_credentials); the next mint then creates a new one.
ALTER TABLE credentials ADD COLUMN kind text NOT NULL DEFAULT 'device'
    CHECK (kind IN ('device', 'inspector'));
CREATE UNIQUE INDEX credentials_inspector_live ON credentials (tenant_id)
    WHERE kind = 'inspector' AND revoked_at IS NULL;

-- +goose Down
DROP INDEX credentials_inspector_live;
ALTER TABLE credentials DROP COLUMN kind;
