package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// ACL is a credential's topic filters, as carried in its token's acl claim.
type ACL struct {
	Pub []string `json:"pub"`
	Sub []string `json:"sub"`
}

// Credential kinds.
const (
	// KindDevice is a credential created for a device.
	KindDevice = "device"
	// KindInspector is a tenant's dashboard inspector credential: one live
	// per tenant, reused by every mint of a short-lived token for the
	// dashboard's in-browser MQTT client.
	KindInspector = "inspector"
)

// Credential is an MQTT credential. Its token is never stored.
type Credential struct {
	ID        string
	TenantID  string
	Kind      string // KindDevice or KindInspector; empty means KindDevice on create
	Name      string
	ACL       ACL
	ExpiresAt *time.Time
	CreatedAt time.Time
	RevokedAt *time.Time
	KID       string
}

const credentialColumns = `id, tenant_id, kind, name, acl, expires_at, created_at, revoked_at, coalesce(kid, '')`

func scanCredential(row pgx.Row) (Credential, error) {
	var c Credential
	err := row.Scan(&c.ID, &c.TenantID, &c.Kind, &c.Name, &c.ACL, &c.ExpiresAt, &c.CreatedAt, &c.RevokedAt, &c.KID)
	return c, err
}

// CreateCredential stores a credential and fills CreatedAt (and Kind, when
// empty, with KindDevice).
func (s *Store) CreateCredential(ctx context.Context, c *Credential) error {
	if c.Kind == "" {
		c.Kind = KindDevice
	}
	err := s.pool.QueryRow(ctx,
		`INSERT INTO credentials (id, tenant_id, kind, name, acl, expires_at, kid) VALUES ($1, $2, $3, $4, $5, $6, $7)
		 RETURNING created_at`,
		c.ID, c.TenantID, c.Kind, c.Name, c.ACL, c.ExpiresAt, c.KID).Scan(&c.CreatedAt)
	return classify("create credential", err)
}

// GetCredential returns one of a tenant's credentials.
func (s *Store) GetCredential(ctx context.Context, tid, cid string) (Credential, error) {
	c, err := scanCredential(s.pool.QueryRow(ctx,
		`SELECT `+credentialColumns+` FROM credentials WHERE id = $1 AND tenant_id = $2`, cid, tid))
	return c, classify("get credential", err)
}

// ListCredentials pages through a tenant's credentials of one kind (""
// for every kind), oldest first, revoked ones included.
func (s *Store) ListCredentials(ctx context.Context, tid, kind string, p Page) ([]Credential, *Cursor, error) {
	at, id := p.afterArgs()
	rows, err := s.pool.Query(ctx,
		`SELECT `+credentialColumns+` FROM credentials
		 WHERE tenant_id = $1 AND ($5 = '' OR kind = $5)
		   AND ($2::timestamptz IS NULL OR (created_at, id) > ($2, $3::text))
		 ORDER BY created_at, id LIMIT $4`, tid, at, id, p.Limit+1, kind)
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

// inspectorName is the name of every inspector credential.
const inspectorName = "dashboard inspector"

// InspectorCredential returns the tenant's live inspector credential,
// creating it (with newID as its id and acl as its ACL) when the tenant has
// none: a first mint, or the previous one was revoked. Concurrent callers
// get the same one (a partial unique index allows one live per tenant).
func (s *Store) InspectorCredential(ctx context.Context, tid, newID string, acl ACL) (Credential, error) {
	for range 3 {
		c, err := scanCredential(s.pool.QueryRow(ctx,
			`SELECT `+credentialColumns+` FROM credentials
			 WHERE tenant_id = $1 AND kind = 'inspector' AND revoked_at IS NULL`, tid))
		if !errors.Is(err, pgx.ErrNoRows) {
			return c, classify("inspector credential", err)
		}
		// ON CONFLICT waits for a concurrent insert and then does nothing;
		// the next round's SELECT, a new snapshot, sees that row.
		c, err = scanCredential(s.pool.QueryRow(ctx,
			`INSERT INTO credentials (id, tenant_id, kind, name, acl) VALUES ($1, $2, 'inspector', $3, $4)
			 ON CONFLICT (tenant_id) WHERE kind = 'inspector' AND revoked_at IS NULL DO NOTHING
			 RETURNING `+credentialColumns, newID, tid, inspectorName, acl))
		if !errors.Is(err, pgx.ErrNoRows) {
			return c, classify("inspector credential", err)
		}
	}
	return Credential{}, errors.New("store: inspector credential: created and revoked concurrently, three times")
}

// RecordInspectorToken notes a fresh token of a tenant's live inspector
// credential: its acl, its exp (the credential's expires_at, so the JWKS
// publishes kid exactly as long as the token lives) and the kid that signed
// it. A revoked credential is left as it is and answers ErrRevoked; as for
// RecordCredentialToken, the row lock orders this against a concurrent
// RevokeCredential.
func (s *Store) RecordInspectorToken(ctx context.Context, tid, cid, kid string, acl ACL, expires time.Time) error {
	tag, err := s.pool.Exec(ctx,
		`UPDATE credentials SET kid = $3, acl = $4, expires_at = $5
		 WHERE id = $1 AND tenant_id = $2 AND kind = 'inspector' AND revoked_at IS NULL`, cid, tid, kid, acl, expires)
	if err != nil {
		return classify("record inspector token", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrRevoked
	}
	return nil
}
