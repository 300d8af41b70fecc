package store

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// NOTIFY channels (docs/contracts.md).
const (
	ChannelCredentials = "berth_credentials"
	ChannelQuotas      = "berth_quotas"
	ChannelPlacement   = "berth_placement"
	// ChannelTopicRules carries the tenant id when its topic rules change.
	ChannelTopicRules = "berth_topic_rules"
	// ChannelTenantsDeleted carries the id of a deleted tenant.
	ChannelTenantsDeleted = "berth_tenants_deleted"
)

// Id prefixes (docs/contracts.md).
const (
	PrefixAccount    = "acc"
	PrefixTenant     = "ten"
	PrefixCredential = "crd"
	PrefixAPIKey     = "key"
	PrefixTopicRule  = "top"
	PrefixSession    = "ses"
)

var (
	// ErrNotFound is returned when a row does not exist or belongs to
	// another account or tenant; callers cannot tell the two apart.
	ErrNotFound = errors.New("store: not found")
	// ErrConflict is returned when a unique value is already taken.
	ErrConflict = errors.New("store: conflict")
	// ErrRevoked is returned when a revoked credential is asked for
	// something only a live one may have (a fresh token).
	ErrRevoked = errors.New("store: credential revoked")
)

// ConflictError names the field whose value is already taken and, when
// known, the id of the row that holds it (HeldBy).
type ConflictError struct {
	Field  string
	HeldBy string
}

func (e *ConflictError) Error() string { return "store: " + e.Field + " already exists" }

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// conflictFields maps unique constraints to the API field they protect.
var conflictFields = map[string]string{
	"accounts_email_key":               "email",
	"tenants_slug_key":                 "slug",
	"topic_rules_tenant_id_filter_key": "filter",
}

// Store runs the API's queries on a pool.
type Store struct {
	pool *pgxpool.Pool
}

// New returns a Store on pool.
func New(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// Ping checks that Postgres answers.
func (s *Store) Ping(ctx context.Context) error {
	return s.pool.Ping(ctx)
}

// querier is what both the pool and a transaction offer.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// inTx runs fn in a transaction, committing when it returns nil.
func (s *Store) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, s.pool, fn)
}

// classify turns driver errors into the package's sentinels.
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" { // unique_violation
		field := conflictFields[pgErr.ConstraintName]
		if field == "" {
			field = "id"
		}
		return &ConflictError{Field: field}
	}
	return fmt.Errorf("store: %s: %w", op, err)
}

func notify(ctx context.Context, q querier, channel, payload string) error {
	_, err := q.Exec(ctx, "SELECT pg_notify($1, $2)", channel, payload)
	return err
}

var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// NewID returns prefix_ followed by the lowercase base32 of 10 random bytes.
func NewID(prefix string) string {
	var b [10]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return prefix + "_" + strings.ToLower(idEncoding.EncodeToString(b[:]))
}

// Cursor is the sort key of the last row of a page.
type Cursor struct {
	At time.Time
	ID string
}

// Page asks for up to Limit rows after After (nil: from the start).
type Page struct {
	After *Cursor
	Limit int
}

// afterArgs returns the cursor as nullable query arguments.
func (p Page) afterArgs() (any, any) {
	if p.After == nil {
		return nil, nil
	}
	return p.After.At, p.After.ID
}

// trim cuts a result fetched with Limit+1 rows down to Limit and returns the
// cursor of the next page, or nil when this was the last one.
func trim[T any](items []T, limit int, key func(T) Cursor) ([]T, *Cursor) {
	if len(items) <= limit {
		return items, nil
	}
	items = items[:limit]
	c := key(items[limit-1])
	return items, &c
}
