package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/billing/plan"
)

// Account is a customer login.
type Account struct {
	ID           string
	Email        string
	PasswordHash string
	CreatedAt    time.Time
}

// Signup is everything a new account starts with.
type Signup struct {
	Account Account
	KeyID   string
	KeyName string
	KeyHash []byte
	Tenant  Tenant
	Quotas  plan.Quotas
}

// CreateSignup creates the account, its first API key and its first tenant
// (placed on a node when one is live) in one transaction. It fills
// s.Tenant's NodeID and CreatedAt fields.
func (s *Store) CreateSignup(ctx context.Context, su *Signup) error {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx,
			`INSERT INTO accounts (id, email, password_hash) VALUES ($1, $2, $3) RETURNING created_at`,
			su.Account.ID, su.Account.Email, su.Account.PasswordHash).Scan(&su.Account.CreatedAt); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx,
			`INSERT INTO api_keys (id, account_id, name, secret_hash) VALUES ($1, $2, $3, $4)`,
			su.KeyID, su.Account.ID, su.KeyName, su.KeyHash); err != nil {
			return err
		}
		su.Tenant.AccountID = su.Account.ID
		return createTenant(ctx, tx, &su.Tenant, su.Quotas)
	})
	return classify("signup", err)
}

// AccountByEmail finds an account by email, case-insensitively.
func (s *Store) AccountByEmail(ctx context.Context, email string) (Account, error) {
	var a Account
	err := s.pool.QueryRow(ctx,
		`SELECT id, email, password_hash, created_at FROM accounts WHERE lower(email) = lower($1)`, email).
		Scan(&a.ID, &a.Email, &a.PasswordHash, &a.CreatedAt)
	return a, classify("account by email", err)
}

// AccountByID returns an account.
func (s *Store) AccountByID(ctx context.Context, id string) (Account, error) {
	var a Account
	err := s.pool.QueryRow(ctx,
		`SELECT id, email, password_hash, created_at FROM accounts WHERE id = $1`, id).
		Scan(&a.ID, &a.Email, &a.PasswordHash, &a.CreatedAt)
	return a, classify("account by id", err)
}
