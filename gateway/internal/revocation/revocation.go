// Package revocation keeps the set of revoked device credentials in memory,
// so the gateway can refuse a revoked credential at CONNECT without a
// database round trip and close the live connections of a credential the
// moment it is revoked.
//
// The set is loaded from Postgres (credentials.revoked_at) and kept current
// by LISTEN berth_credentials, whose payload is the revoked credential's id
// (docs/contracts.md). Notifications sent while the listening connection is
// down are lost, so every (re)connection LISTENs first and then re-reads the
// whole set: nothing revoked in the gap is missed.
//
// Credentials that expired over an hour ago are left out of the load: their
// tokens fail the exp check anyway.
package revocation

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/gateway/internal/pglisten"
)

// Channel is the NOTIFY channel the API announces revocations on.
const Channel = "berth_credentials"

const loadQuery = `SELECT id FROM credentials
WHERE revoked_at IS NOT NULL AND (expires_at IS NULL OR expires_at > now() - interval '1 hour')`

// Options tunes a Set; zero values take the defaults.
type Options struct {
	Logger   *slog.Logger  // discard when nil
	RetryMin time.Duration // first reconnect delay; 100 ms
	RetryMax time.Duration // longest reconnect delay; 5 s
}

// Set is the revoked credential ids. New, Start, then Shutdown.
type Set struct {
	log    *slog.Logger
	listen *pglisten.Listener

	mu       sync.Mutex
	revoked  map[string]struct{}
	watchers map[string]*watchEntry
}

type watchEntry struct {
	ch   chan struct{}
	refs int
}

// New returns a Set reading from pool.
func New(pool *pgxpool.Pool, opt Options) *Set {
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Set{log: opt.Logger, revoked: map[string]struct{}{}, watchers: map[string]*watchEntry{}}
	s.listen = pglisten.New(pool, pglisten.Options{
		Channels: []string{Channel},
		Reset:    s.load,
		Notify:   s.notify,
		Logger:   opt.Logger,
		RetryMin: opt.RetryMin,
		RetryMax: opt.RetryMax,
	})
	return s
}

// Start LISTENs and loads the set before it returns (a gateway that cannot
// tell revoked credentials apart must not start), then follows
// notifications in the background, reconnecting and reloading as needed,
// until Shutdown.
func (s *Set) Start(ctx context.Context) error {
	if err := s.listen.Start(ctx); err != nil {
		return fmt.Errorf("revocation: start: %w", err)
	}
	return nil
}

// Shutdown stops listening.
func (s *Set) Shutdown(ctx context.Context) error { return s.listen.Shutdown(ctx) }

// Loads returns how many full loads have completed (one per connection).
func (s *Set) Loads() int { return s.listen.Resets() }

func (s *Set) load(ctx context.Context, conn *pgx.Conn) error {
	rows, err := conn.Query(ctx, loadQuery)
	if err != nil {
		return err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	set := make(map[string]struct{}, len(ids))
	for _, id := range ids {
		set[id] = struct{}{}
	}
	s.mu.Lock()
	s.revoked = set
	for _, id := range ids {
		s.fireLocked(id)
	}
	s.mu.Unlock()
	s.log.Debug("revocation set loaded", "revoked", len(ids))
	return nil
}

func (s *Set) notify(n *pgconn.Notification) {
	if n.Channel != Channel || n.Payload == "" {
		return
	}
	s.mu.Lock()
	s.revoked[n.Payload] = struct{}{}
	s.fireLocked(n.Payload)
	s.mu.Unlock()
	s.log.Info("credential revoked", "credential_id", n.Payload)
}

// fireLocked wakes the watchers of id. s.mu must be held.
func (s *Set) fireLocked(id string) {
	if w, ok := s.watchers[id]; ok {
		close(w.ch)
		delete(s.watchers, id)
	}
}

// Revoked reports whether id is revoked.
func (s *Set) Revoked(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.revoked[id]
	return ok
}

// closedCh is returned by Watch for credentials already revoked. It is
// closed once at package init and never written again.
var closedCh = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Watch is a subscription to the revocation of one credential.
type Watch struct {
	s    *Set
	id   string
	ch   chan struct{}
	once sync.Once
}

// Watch subscribes to the revocation of id. Done is closed when id is
// revoked, at once if it already is; so Watch-then-check has no gap. Call
// Stop when the connection ends.
func (s *Set) Watch(id string) *Watch {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.revoked[id]; ok {
		return &Watch{s: s, id: id, ch: closedCh}
	}
	w, ok := s.watchers[id]
	if !ok {
		w = &watchEntry{ch: make(chan struct{})}
		s.watchers[id] = w
	}
	w.refs++
	return &Watch{s: s, id: id, ch: w.ch}
}

// Done is closed when the credential is revoked.
func (w *Watch) Done() <-chan struct{} { return w.ch }

// Stop ends the subscription. It is idempotent.
func (w *Watch) Stop() {
	w.once.Do(func() {
		w.s.mu.Lock()
		defer w.s.mu.Unlock()
		e, ok := w.s.watchers[w.id]
		if !ok || e.ch != w.ch {
			return // already fired
		}
		if e.refs--; e.refs == 0 {
			delete(w.s.watchers, w.id)
		}
	})
}

// watching returns the number of credentials being watched (tests).
func (s *Set) watching() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.watchers)
}
