package revocation

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/testenv"
)

// seed inserts an account, a tenant and the given credentials.
func seed(t *testing.T, pool *pgxpool.Pool, creds ...string) {
	t.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO accounts (id, email, password_hash) VALUES ('acc_1', 'a@example.com', 'x')`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO tenants (id, account_id, slug, plan) VALUES ('ten_1', 'acc_1', 'one', 'free')`); err != nil {
		t.Fatal(err)
	}
	for _, c := range creds {
		if _, err := pool.Exec(ctx, `INSERT INTO credentials (id, tenant_id, name, acl) VALUES ($1, 'ten_1', $1, '{}')`, c); err != nil {
			t.Fatal(err)
		}
	}
}

// revoke does what the API's DELETE .../credentials/{cid} does.
func revoke(t *testing.T, pool *pgxpool.Pool, id string, notify bool) {
	t.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `UPDATE credentials SET revoked_at = now() WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if notify {
		if _, err := pool.Exec(ctx, `SELECT pg_notify($1, $2)`, Channel, id); err != nil {
			t.Fatal(err)
		}
	}
}

func start(t *testing.T, pool *pgxpool.Pool) *Set {
	t.Helper()
	s := New(pool, Options{RetryMin: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return s
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: not signalled within 5 s", what)
	}
}

func TestLoadsRevokedAtStart(t *testing.T) {
	pool := testenv.Postgres(t)
	seed(t, pool, "crd_live", "crd_old", "crd_expired_long_ago")
	revoke(t, pool, "crd_old", false)
	if _, err := pool.Exec(context.Background(), `UPDATE credentials SET revoked_at = now(), expires_at = now() - interval '2 hours' WHERE id = 'crd_expired_long_ago'`); err != nil {
		t.Fatal(err)
	}
	s := start(t, pool)
	tests := []struct {
		id   string
		want bool
	}{{"crd_live", false}, {"crd_old", true}, {"crd_expired_long_ago", false}, {"crd_unknown", false}}
	for _, tc := range tests {
		t.Run(tc.id, func(t *testing.T) {
			if got := s.Revoked(tc.id); got != tc.want {
				t.Fatalf("Revoked(%q) = %v, want %v", tc.id, got, tc.want)
			}
		})
	}
	// Watching a credential that is already revoked fires at once.
	w := s.Watch("crd_old")
	defer w.Stop()
	waitClosed(t, w.Done(), "watch of an already revoked credential")
}

func TestNotifyRevokesAndWakesWatchers(t *testing.T) {
	pool := testenv.Postgres(t)
	seed(t, pool, "crd_a", "crd_b")
	s := start(t, pool)
	wa1, wa2, wb := s.Watch("crd_a"), s.Watch("crd_a"), s.Watch("crd_b")
	defer wb.Stop()
	revoke(t, pool, "crd_a", true)
	waitClosed(t, wa1.Done(), "first watcher of crd_a")
	waitClosed(t, wa2.Done(), "second watcher of crd_a")
	if !s.Revoked("crd_a") {
		t.Fatal("crd_a not revoked after NOTIFY")
	}
	select {
	case <-wb.Done():
		t.Fatal("crd_b watcher fired on crd_a's revocation")
	default:
	}
	wa1.Stop()
	wa2.Stop()
	wa2.Stop() // idempotent
	if n := s.Watching(); n != 1 {
		t.Fatalf("watching %d credentials, want 1 (crd_b)", n)
	}
}

func TestStoppedWatchIsForgotten(t *testing.T) {
	pool := testenv.Postgres(t)
	seed(t, pool, "crd_a")
	s := start(t, pool)
	w1, w2 := s.Watch("crd_a"), s.Watch("crd_a")
	w1.Stop()
	if n := s.Watching(); n != 1 {
		t.Fatalf("watching %d after one of two Stops, want 1", n)
	}
	w2.Stop()
	if n := s.Watching(); n != 0 {
		t.Fatalf("watching %d after both Stops, want 0", n)
	}
}

func TestReconnectReloads(t *testing.T) {
	pool := testenv.Postgres(t)
	seed(t, pool, "crd_a")
	s := start(t, pool)
	w := s.Watch("crd_a")
	defer w.Stop()
	if s.Loads() != 1 {
		t.Fatalf("Loads = %d, want 1", s.Loads())
	}
	ctx := context.Background()
	// Kill the listener's backend, then revoke without a NOTIFY, as if the
	// notification had been sent while the listener was away.
	if _, err := pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE '%credentials%revoked_at%'`); err != nil {
		t.Fatal(err)
	}
	revoke(t, pool, "crd_a", false)
	waitClosed(t, w.Done(), "watcher after reconnect")
	if !s.Revoked("crd_a") {
		t.Fatal("crd_a not revoked after the reload")
	}
	// Loads counts a reload once it has returned, just after it woke us.
	for deadline := time.Now().Add(5 * time.Second); s.Loads() < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Loads = %d, want >= 2 (a reload after reconnecting)", s.Loads())
		}
	}
}

// AfterRevoked runs its function once on the revocation (at once for a
// credential already revoked), a stopped one never, and a stopped
// registration is forgotten like a stopped Watch.
func TestAfterRevoked(t *testing.T) {
	pool := testenv.Postgres(t)
	seed(t, pool, "crd_a", "crd_b", "crd_c")
	revoke(t, pool, "crd_c", false)
	s := start(t, pool)
	fired := func() (func(), chan struct{}) {
		ch := make(chan struct{}, 2)
		return func() { ch <- struct{}{} }, ch
	}
	fa, cha := fired()
	fb, chb := fired()
	stopA := s.AfterRevoked("crd_a", fa)
	stopB := s.AfterRevoked("crd_b", fb)
	wa := s.Watch("crd_a") // a Watch beside it
	defer wa.Stop()
	if !stopB() || stopB() {
		t.Fatal("stop of a pending registration: want true once, then false")
	}
	revoke(t, pool, "crd_a", true)
	revoke(t, pool, "crd_b", true)
	waitClosed(t, cha, "AfterRevoked of crd_a")
	waitClosed(t, wa.Done(), "the Watch beside it")
	if stopA() {
		t.Fatal("stop after the function ran reported true")
	}
	// crd_b's NOTIFY came after crd_a's: had its stopped function run,
	// it would be queued by now.
	select {
	case <-chb:
		t.Fatal("a stopped registration ran")
	default:
	}
	fc, chc := fired()
	if s.AfterRevoked("crd_c", fc)() {
		t.Fatal("stop of an already revoked credential's registration reported true")
	}
	select {
	case <-chc:
	default:
		t.Fatal("AfterRevoked of an already revoked credential did not run at once")
	}
	if len(cha) != 0 {
		t.Fatal("a function ran twice")
	}
	stop := s.AfterRevoked("crd_live", func() {})
	w := s.Watch("crd_live")
	stop()
	if n := s.Watching(); n != 1 {
		t.Fatalf("watching %d with a Watch left, want 1", n)
	}
	w.Stop()
	if n := s.Watching(); n != 0 {
		t.Fatalf("watching %d after the Watch and the registration stopped, want 0", n)
	}
}
