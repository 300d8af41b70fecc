-- +goose Up
-- Dashboard sessions: a short-lived bearer token plus a longer-lived refresh
-- token. Only SHA-256 hashes of both are stored.
CREATE TABLE sessions (
    id                 text PRIMARY KEY,
    account_id         text NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    token_hash         bytea NOT NULL UNIQUE,
    refresh_hash       bytea NOT NULL UNIQUE,
    expires_at         timestamptz NOT NULL,
    refresh_expires_at timestamptz NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sessions_account ON sessions (account_id);

-- Ed25519 keys that sign device credential tokens, identified by kid. The
-- newest key without retired_at signs; a retired key stays published in the
-- JWKS while any unrevoked, unexpired credential signed by it exists.
-- private_key is the 32-byte seed, sealed with AES-256-GCM (nonce prepended,
-- kid as additional data) when encryption = 'aes-256-gcm'.
CREATE TABLE signing_keys (
    kid         text PRIMARY KEY,
    public_key  bytea NOT NULL,
    private_key bytea NOT NULL,
    encryption  text NOT NULL CHECK (encryption IN ('none', 'aes-256-gcm')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    retired_at  timestamptz
);

-- The key that signed each credential's token.
ALTER TABLE credentials ADD COLUMN kid text REFERENCES signing_keys (kid);
CREATE INDEX credentials_kid_live ON credentials (kid) WHERE revoked_at IS NULL;

-- +goose Down
DROP INDEX credentials_kid_live;
ALTER TABLE credentials DROP COLUMN kid;
DROP TABLE signing_keys, sessions;
