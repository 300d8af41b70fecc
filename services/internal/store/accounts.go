package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/quotas"
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
	// KeyID, KeyName and KeyHash make a first API key when KeyID is set.
	KeyID   string
	KeyName string
	KeyHash []byte
	Tenant  Tenant
	Quotas  quotas.Quotas
}

// ErrEmailTaken is returned by CreateSignup when the email already has an
// account. Nothing was created, but the same work was done.
var ErrEmailTaken = errors.New("store: email has an account")

// errDryRun ends a signup transaction that only did the work.
var errDryRun = errors.New("store: signup dry run")

// CreateSignup creates the account, its first API key (when su.KeyID is
// set) and its first tenant (placed on a node when one is live) in one
// transaction. It fills s.Tenant's NodeID and CreatedAt fields.
//
// A taken tenant slug is a ConflictError on "slug", checked before the
// email so that answer does not depend on the email. An email that has an
// account (case-insensitively) is ErrEmailTaken, after the same inserts
// under a throwaway email, rolled back: a signup with a known email costs
// what a new one does, so its time does not tell either.
func (s *Store) CreateSignup(ctx context.Context, su *Signup) error {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var slugTaken, emailTaken bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tenants WHERE slug = $1),
			EXISTS (SELECT 1 FROM accounts WHERE lower(email) = lower($2))`,
			su.Tenant.Slug, su.Account.Email).Scan(&slugTaken, &emailTaken); err != nil {
			return err
		}
		if slugTaken {
			return &ConflictError{Field: "slug"}
		}
		acc := su.Account
		if emailTaken {
			acc.ID, acc.Email = NewID(PrefixAccount), NewID("signup")+"@dry-run.invalid"
		}
		if err := tx.QueryRow(ctx,
			`INSERT INTO accounts (id, email, password_hash) VALUES ($1, $2, $3) RETURNING created_at`,
			acc.ID, acc.Email, acc.PasswordHash).Scan(&acc.CreatedAt); err != nil {
			return err
		}
		if su.KeyID != "" {
			if _, err := tx.Exec(ctx,
				`INSERT INTO api_keys (id, account_id, name, secret_hash) VALUES ($1, $2, $3, $4)`,
				su.KeyID, acc.ID, su.KeyName, su.KeyHash); err != nil {
				return err
			}
		}
		t := su.Tenant
		t.AccountID = acc.ID
		if err := createTenant(ctx, tx, &t, su.Quotas); err != nil {
			return err
		}
		if emailTaken {
			return errDryRun // roll it all back
		}
		su.Account.CreatedAt, su.Tenant = acc.CreatedAt, t
		return nil
	})
	if errors.Is(err, errDryRun) {
		return ErrEmailTaken
	}
	var conflict *ConflictError
	if err = classify("signup", err); errors.As(err, &conflict) && conflict.Field == "email" {
		return ErrEmailTaken // a concurrent signup with the same email won
	}
	return err
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
