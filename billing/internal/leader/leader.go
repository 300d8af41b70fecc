// Package leader elects one leader among processes sharing a Postgres
// database: the holder of a session-level advisory lock on a connection it
// keeps. A second process polls for the lock and takes over when the
// holder releases it or its session ends (a killed process's connection
// closes and Postgres frees its locks).
package leader

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrLost reports a lease whose connection failed: its lock may be gone.
var ErrLost = errors.New("leader: lease lost")

// Lease is a held lock. Its connection is taken out of the pool until
// Release.
type Lease struct {
	conn *pgxpool.Conn
	key  int64
}

// Acquire tries for the lock key every poll until it holds it or ctx ends.
func Acquire(ctx context.Context, pool *pgxpool.Pool, key int64, poll time.Duration) (*Lease, error) {
	for {
		l, err := TryAcquire(ctx, pool, key)
		if l != nil || err != nil && ctx.Err() != nil {
			return l, err
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// TryAcquire takes the lock if it is free; nil, nil if another holds it.
func TryAcquire(ctx context.Context, pool *pgxpool.Pool, key int64) (*Lease, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("leader: connect: %w", err)
	}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&ok); err != nil {
		conn.Release()
		return nil, fmt.Errorf("leader: try lock: %w", err)
	}
	if !ok {
		conn.Release()
		return nil, nil
	}
	return &Lease{conn: conn, key: key}, nil
}

// Check returns ErrLost if the lease's connection no longer answers.
func (l *Lease) Check(ctx context.Context) error {
	if err := l.conn.Ping(ctx); err != nil {
		return fmt.Errorf("%w: %v", ErrLost, err)
	}
	return nil
}

// Release unlocks and returns the connection; a connection that fails to
// unlock is closed, which frees the lock too.
func (l *Lease) Release(ctx context.Context) {
	if _, err := l.conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, l.key); err != nil {
		_ = l.conn.Conn().Close(ctx)
	}
	l.conn.Release()
}
