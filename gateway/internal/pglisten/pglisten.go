// Package pglisten follows Postgres NOTIFY channels on a dedicated
// connection and reconnects when it is lost.
//
// Notifications sent while no connection is listening are lost for good, so
// on every (re)connection the Listener first LISTENs and only then calls
// the owner's Reset, which re-reads whatever state the notifications are
// about (docs/contracts.md: "A listener that reconnects re-reads the full
// state"). Whatever changes after the LISTEN is then either in what Reset
// reads or in a notification that follows it.
package pglisten

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Options configures a Listener.
type Options struct {
	Channels []string
	// Reset re-reads the full state on the listening connection, after
	// LISTEN and before any notification is delivered.
	Reset func(ctx context.Context, conn *pgx.Conn) error
	// Notify handles one notification. It runs on the listener goroutine.
	Notify   func(n *pgconn.Notification)
	Logger   *slog.Logger  // discard when nil
	RetryMin time.Duration // first reconnect delay; 100 ms
	RetryMax time.Duration // longest reconnect delay; 5 s
}

// Listener follows channels. New, Start, Shutdown.
type Listener struct {
	pool *pgxpool.Pool
	opt  Options

	mu     sync.Mutex
	resets int

	cancel context.CancelFunc
	done   chan struct{}
}

// New returns a Listener that takes its connections from pool.
func New(pool *pgxpool.Pool, opt Options) *Listener {
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.RetryMin <= 0 {
		opt.RetryMin = 100 * time.Millisecond
	}
	if opt.RetryMax <= 0 {
		opt.RetryMax = 5 * time.Second
	}
	return &Listener{pool: pool, opt: opt}
}

// Start connects, LISTENs and runs Reset before it returns, then follows
// the channels in the background until Shutdown.
func (l *Listener) Start(ctx context.Context) error {
	conn, err := l.connect(ctx)
	if err != nil {
		return err
	}
	ctx, l.cancel = context.WithCancel(context.WithoutCancel(ctx))
	l.done = make(chan struct{})
	go l.run(ctx, conn)
	return nil
}

// Shutdown stops listening and waits for the listener goroutine.
func (l *Listener) Shutdown(ctx context.Context) error {
	if l.cancel == nil {
		return nil
	}
	l.cancel()
	select {
	case <-l.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Resets returns how many times Reset has completed (once per connection).
func (l *Listener) Resets() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.resets
}

func (l *Listener) connect(ctx context.Context) (*pgx.Conn, error) {
	pc, err := l.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("pglisten: acquire: %w", err)
	}
	conn := pc.Hijack() // ours while we listen; never returned to the pool
	for _, ch := range l.opt.Channels {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			conn.Close(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("pglisten: LISTEN %s: %w", ch, err)
		}
	}
	if l.opt.Reset != nil {
		if err := l.opt.Reset(ctx, conn); err != nil {
			conn.Close(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("pglisten: reset: %w", err)
		}
	}
	l.mu.Lock()
	l.resets++
	l.mu.Unlock()
	return conn, nil
}

func (l *Listener) run(ctx context.Context, conn *pgx.Conn) {
	defer close(l.done)
	delay := l.opt.RetryMin
	for {
		if conn != nil {
			err := l.follow(ctx, conn)
			conn.Close(context.WithoutCancel(ctx))
			conn = nil
			if ctx.Err() != nil {
				return
			}
			l.opt.Logger.Warn("postgres listener lost; reconnecting", "channels", l.opt.Channels, "err", err)
			delay = l.opt.RetryMin
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		c, err := l.connect(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			l.opt.Logger.Warn("postgres listener reconnect failed", "channels", l.opt.Channels, "err", err, "retry_in", delay)
			delay = min(2*delay, l.opt.RetryMax)
			continue
		}
		conn = c
	}
}

func (l *Listener) follow(ctx context.Context, conn *pgx.Conn) error {
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if l.opt.Notify != nil {
			l.opt.Notify(n)
		}
	}
}
