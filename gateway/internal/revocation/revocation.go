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
	ch    chan struct{}
	refs  int                        // Watches
	after map[*afterRevoked]struct{} // AfterRevoked functions
}

// afterRevoked is one AfterRevoked registration.
type afterRevoked struct{ f func() }

// idleLocked reports whether nothing watches e any more.
func (e *watchEntry) idleLocked() bool { return e.refs == 0 && len(e.after) == 0 }

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
	var after []func()
	s.mu.Lock()
	s.revoked = set
	for _, id := range ids {
		after = s.fireLocked(id, after)
	}
	s.mu.Unlock()
	for _, f := range after {
		f()
	}
	s.log.Debug("revocation set loaded", "revoked", len(ids))
	return nil
}

func (s *Set) notify(n *pgconn.Notification) {
	if n.Channel != Channel || n.Payload == "" {
		return
	}
	s.mu.Lock()
	s.revoked[n.Payload] = struct{}{}
	after := s.fireLocked(n.Payload, nil)
	s.mu.Unlock()
	for _, f := range after {
		f()
	}
	s.log.Info("credential revoked", "credential_id", n.Payload)
}

// fireLocked wakes the watchers of id and appends its AfterRevoked
// functions to after, for the caller to run once s.mu is released. s.mu
// must be held.
func (s *Set) fireLocked(id string, after []func()) []func() {
	if w, ok := s.watchers[id]; ok {
		close(w.ch)
		for a := range w.after {
			after = append(after, a.f)
		}
		delete(s.watchers, id)
	}
	return after
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
		if e.refs--; e.idleLocked() {
			delete(w.s.watchers, w.id)
		}
	})
}

// AfterRevoked arranges for f to run once id is revoked (at once, before
// AfterRevoked returns, if it already is), on the goroutine that learns
// of the revocation: f must not block (start a timer, send on a buffered
// channel). Unlike a Watch it holds no goroutine of the caller while it
// waits: a connection the gateway no longer serves itself (a handed-off
// device) costs a map entry, not a blocked goroutine. stop unregisters f;
// it reports whether it did so before f was started, and is idempotent.
func (s *Set) AfterRevoked(id string, f func()) (stop func() bool) {
	s.mu.Lock()
	if _, ok := s.revoked[id]; ok {
		s.mu.Unlock()
		f()
		return func() bool { return false }
	}
	e, ok := s.watchers[id]
	if !ok {
		e = &watchEntry{ch: make(chan struct{})}
		s.watchers[id] = e
	}
	if e.after == nil {
		e.after = map[*afterRevoked]struct{}{}
	}
	a := &afterRevoked{f: f}
	e.after[a] = struct{}{}
	s.mu.Unlock()
	return func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.watchers[id] != e {
			return false // fired (and perhaps watched anew since)
		}
		if _, ok := e.after[a]; !ok {
			return false
		}
		delete(e.after, a)
		if e.idleLocked() {
			delete(s.watchers, id)
		}
		return true
	}
}

// Watching returns how many credentials are watched (by Watch or AfterRevoked).
func (s *Set) Watching() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.watchers)
}
