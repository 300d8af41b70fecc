package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// SigningKey is an Ed25519 key that signs credential tokens. Private holds
// the seed as stored: sealed when Encryption is "aes-256-gcm".
type SigningKey struct {
	KID        string
	Public     []byte
	Private    []byte
	Encryption string
	CreatedAt  time.Time
	RetiredAt  *time.Time
}

const signingKeyColumns = `kid, public_key, private_key, encryption, created_at, retired_at`

func scanSigningKey(row pgx.Row) (SigningKey, error) {
	var k SigningKey
	err := row.Scan(&k.KID, &k.Public, &k.Private, &k.Encryption, &k.CreatedAt, &k.RetiredAt)
	return k, err
}

// ActiveSigningKey returns the newest unretired key.
func (s *Store) ActiveSigningKey(ctx context.Context) (SigningKey, error) {
	k, err := scanSigningKey(s.pool.QueryRow(ctx,
		`SELECT `+signingKeyColumns+` FROM signing_keys WHERE retired_at IS NULL ORDER BY created_at DESC, kid DESC LIMIT 1`))
	return k, classify("active signing key", err)
}

// PublishedSigningKeys returns the keys a verifier may need: every
// unretired key, and every retired key that signed a credential which is
// neither revoked nor expired (credentials without expiry keep their key
// published until they are revoked).
func (s *Store) PublishedSigningKeys(ctx context.Context) ([]SigningKey, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT `+signingKeyColumns+` FROM signing_keys k
		WHERE k.retired_at IS NULL OR EXISTS (
			SELECT 1 FROM credentials c
			WHERE c.kid = k.kid AND c.revoked_at IS NULL AND (c.expires_at IS NULL OR c.expires_at > now()))
		ORDER BY k.created_at DESC, k.kid DESC`)
	if err != nil {
		return nil, classify("published signing keys", err)
	}
	keys, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (SigningKey, error) { return scanSigningKey(row) })
	return keys, classify("published signing keys", err)
}

// RotateSigningKey makes k the active key and retires the others, unless
// the active key is younger than minAge (then it returns the active key and
// false). Concurrent API instances serialize on an advisory lock, so one
// interval yields one rotation.
func (s *Store) RotateSigningKey(ctx context.Context, k SigningKey, minAge time.Duration) (SigningKey, bool, error) {
	active := k
	rotated := false
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('berth_signing_keys'))`); err != nil {
			return err
		}
		cur, err := scanSigningKey(tx.QueryRow(ctx,
			`SELECT `+signingKeyColumns+` FROM signing_keys WHERE retired_at IS NULL ORDER BY created_at DESC, kid DESC LIMIT 1`))
		switch {
		case err == nil:
			var young bool
			if err := tx.QueryRow(ctx, `SELECT $1::timestamptz > now() - $2::bigint * interval '1 microsecond'`,
				cur.CreatedAt, minAge.Microseconds()).Scan(&young); err != nil {
				return err
			}
			if young {
				active = cur
				return nil
			}
		case err != pgx.ErrNoRows:
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE signing_keys SET retired_at = now() WHERE retired_at IS NULL`); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx,
			`INSERT INTO signing_keys (kid, public_key, private_key, encryption) VALUES ($1, $2, $3, $4) RETURNING created_at`,
			k.KID, k.Public, k.Private, k.Encryption).Scan(&active.CreatedAt); err != nil {
			return err
		}
		rotated = true
		return nil
	})
	return active, rotated, classify("rotate signing key", err)
}
