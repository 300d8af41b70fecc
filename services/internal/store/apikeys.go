package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// APIKey is an account's key; the secret itself is never stored.
type APIKey struct {
	ID         string
	AccountID  string
	Name       string
	CreatedAt  time.Time
	LastUsedAt *time.Time
	RevokedAt  *time.Time
}

// CreateAPIKey stores a key under the hash of its secret and fills CreatedAt.
func (s *Store) CreateAPIKey(ctx context.Context, k *APIKey, hash []byte) error {
	err := s.pool.QueryRow(ctx,
		`INSERT INTO api_keys (id, account_id, name, secret_hash) VALUES ($1, $2, $3, $4) RETURNING created_at`,
		k.ID, k.AccountID, k.Name, hash).Scan(&k.CreatedAt)
	return classify("create api key", err)
}

// ListAPIKeys pages through an account's keys, oldest first.
func (s *Store) ListAPIKeys(ctx context.Context, accountID string, p Page) ([]APIKey, *Cursor, error) {
	at, id := p.afterArgs()
	rows, err := s.pool.Query(ctx,
		`SELECT id, account_id, name, created_at, last_used_at, revoked_at FROM api_keys
		 WHERE account_id = $1 AND ($2::timestamptz IS NULL OR (created_at, id) > ($2, $3::text))
		 ORDER BY created_at, id LIMIT $4`, accountID, at, id, p.Limit+1)
	if err != nil {
		return nil, nil, classify("list api keys", err)
	}
	keys, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (APIKey, error) {
		var k APIKey
		err := row.Scan(&k.ID, &k.AccountID, &k.Name, &k.CreatedAt, &k.LastUsedAt, &k.RevokedAt)
		return k, err
	})
	if err != nil {
		return nil, nil, classify("list api keys", err)
	}
	keys, next := trim(keys, p.Limit, func(k APIKey) Cursor { return Cursor{At: k.CreatedAt, ID: k.ID} })
	return keys, next, nil
}

// RevokeAPIKey revokes one of the account's keys; revoking twice is a no-op.
func (s *Store) RevokeAPIKey(ctx context.Context, accountID, id string) error {
	tag, err := s.pool.Exec(ctx,
		`UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1 AND account_id = $2`, id, accountID)
	if err == nil && tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return classify("revoke api key", err)
}

// APIKeyByHash returns the unrevoked key whose secret hashes to hash and
// records its use (at most once a minute, to keep reads cheap).
func (s *Store) APIKeyByHash(ctx context.Context, hash []byte) (APIKey, error) {
	var k APIKey
	err := s.pool.QueryRow(ctx,
		`SELECT id, account_id, name, created_at, last_used_at, revoked_at FROM api_keys
		 WHERE secret_hash = $1 AND revoked_at IS NULL`, hash).
		Scan(&k.ID, &k.AccountID, &k.Name, &k.CreatedAt, &k.LastUsedAt, &k.RevokedAt)
	if err != nil {
		return k, classify("api key by hash", err)
	}
	if k.LastUsedAt == nil || time.Since(*k.LastUsedAt) > time.Minute {
		if _, err := s.pool.Exec(ctx, `UPDATE api_keys SET last_used_at = now() WHERE id = $1`, k.ID); err != nil {
			return k, classify("touch api key", err)
		}
	}
	return k, nil
}
