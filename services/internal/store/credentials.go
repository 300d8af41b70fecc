package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// ACL is a credential's topic filters, as carried in its token's acl claim.
type ACL struct {
	Pub []string `json:"pub"`
	Sub []string `json:"sub"`
}

// Credential is a device credential. Its token is never stored.
type Credential struct {
	ID        string
	TenantID  string
	Name      string
	ACL       ACL
	ExpiresAt *time.Time
	CreatedAt time.Time
	RevokedAt *time.Time
	KID       string
}

const credentialColumns = `id, tenant_id, name, acl, expires_at, created_at, revoked_at, coalesce(kid, '')`

func scanCredential(row pgx.Row) (Credential, error) {
	var c Credential
	err := row.Scan(&c.ID, &c.TenantID, &c.Name, &c.ACL, &c.ExpiresAt, &c.CreatedAt, &c.RevokedAt, &c.KID)
	return c, err
}

// CreateCredential stores a credential and fills CreatedAt.
func (s *Store) CreateCredential(ctx context.Context, c *Credential) error {
	err := s.pool.QueryRow(ctx,
		`INSERT INTO credentials (id, tenant_id, name, acl, expires_at, kid) VALUES ($1, $2, $3, $4, $5, $6)
		 RETURNING created_at`,
		c.ID, c.TenantID, c.Name, c.ACL, c.ExpiresAt, c.KID).Scan(&c.CreatedAt)
	return classify("create credential", err)
}

// GetCredential returns one of a tenant's credentials.
func (s *Store) GetCredential(ctx context.Context, tid, cid string) (Credential, error) {
	c, err := scanCredential(s.pool.QueryRow(ctx,
		`SELECT `+credentialColumns+` FROM credentials WHERE id = $1 AND tenant_id = $2`, cid, tid))
	return c, classify("get credential", err)
}

// ListCredentials pages through a tenant's credentials, oldest first,
// revoked ones included.
func (s *Store) ListCredentials(ctx context.Context, tid string, p Page) ([]Credential, *Cursor, error) {
	at, id := p.afterArgs()
	rows, err := s.pool.Query(ctx,
		`SELECT `+credentialColumns+` FROM credentials
		 WHERE tenant_id = $1 AND ($2::timestamptz IS NULL OR (created_at, id) > ($2, $3::text))
		 ORDER BY created_at, id LIMIT $4`, tid, at, id, p.Limit+1)
	if err != nil {
		return nil, nil, classify("list credentials", err)
	}
	cs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Credential, error) { return scanCredential(row) })
	if err != nil {
		return nil, nil, classify("list credentials", err)
	}
	cs, next := trim(cs, p.Limit, func(c Credential) Cursor { return Cursor{At: c.CreatedAt, ID: c.ID} })
	return cs, next, nil
}

// RevokeCredential marks a tenant's credential revoked and, the first time,
// announces its id on berth_credentials in the same transaction, so
// gateways and nodes learn of it exactly when it takes effect.
func (s *Store) RevokeCredential(ctx context.Context, tid, cid string) error {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var revoked *time.Time
		if err := tx.QueryRow(ctx,
			`SELECT revoked_at FROM credentials WHERE id = $1 AND tenant_id = $2 FOR UPDATE`, cid, tid).Scan(&revoked); err != nil {
			return err
		}
		if revoked != nil {
			return nil
		}
		if _, err := tx.Exec(ctx, `UPDATE credentials SET revoked_at = now() WHERE id = $1`, cid); err != nil {
			return err
		}
		return notify(ctx, tx, ChannelCredentials, cid)
	})
	return classify("revoke credential", err)
}

// RecordCredentialToken notes that a fresh token for a tenant's credential
// was signed with kid. The credential's kid names the key of its newest
// token, so the JWKS keeps that key published for as long as the
// credential lives (a token signed before a rotation stops verifying once
// no live credential names its key). A revoked credential is left as it is
// and answers ErrRevoked: the row lock orders this against a concurrent
// RevokeCredential, so no token is recorded after a revocation commits.
func (s *Store) RecordCredentialToken(ctx context.Context, tid, cid, kid string) error {
	var revoked *time.Time
	err := s.pool.QueryRow(ctx,
		`UPDATE credentials SET kid = CASE WHEN revoked_at IS NULL THEN $3 ELSE kid END
		 WHERE id = $1 AND tenant_id = $2 RETURNING revoked_at`, cid, tid, kid).Scan(&revoked)
	if err != nil {
		return classify("record credential token", err)
	}
	if revoked != nil {
		return ErrRevoked
	}
	return nil
}
