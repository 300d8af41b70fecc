// Package store is the API's Postgres access: every query the control plane
// runs, over a pgx pool, returning concrete types and the sentinel errors
// ErrNotFound, ErrConflict (a *ConflictError names the field) and
// ErrRevoked.
//
// Every tenant-scoped query takes the tenant id (and tenant lookups the
// account id) in its WHERE clause, so a row of another tenant is simply not
// found: authorization is structural, not a check a handler may forget.
//
// Lists use keyset pagination. A Cursor is the sort key of the last row
// returned; the HTTP layer turns it into an opaque string:
//
//	Cursor{At: created_at (or span start), ID: id (or trace id)}
//
// Changes that other processes act on are announced in the same transaction
// with pg_notify (see docs/contracts.md): berth_credentials (credential id),
// berth_quotas (tenant id) and berth_placement (tenant id).
package store
