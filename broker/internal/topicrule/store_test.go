package topicrule

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/broker/internal/tenanttest"
	"berth.dev/testenv"
)

type change struct {
	tenant string
	set    *Set
}

func startStore(t *testing.T) (*Store, *pgxpool.Pool, chan change) {
	t.Helper()
	url := testenv.DatabaseURL(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	changes := make(chan change, 16)
	s := NewStore(pool, slog.New(slog.NewTextHandler(io.Discard, nil)), func(id string, set *Set) { changes <- change{id, set} })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, url) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return s, pool, changes
}

// awaitListener waits until the store's LISTEN session is up, so that a
// NOTIFY sent from then on reaches it. Its first statement is LISTEN and
// the re-read of what it holds may follow at once, so any statement at all
// says it is up.
func awaitListener(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = $1 AND query <> ''`, ListenerApplicationName).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("listener never connected")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func awaitChange(t *testing.T, changes chan change, tenant string, ok func(*Set) bool) *Set {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case c := <-changes:
			if c.tenant == tenant && ok(c.set) {
				return c.set
			}
		case <-deadline:
			t.Fatalf("no expected change of %s within 10 s", tenant)
		}
	}
}

func TestStoreLoadsAndFollowsNotify(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool, changes := startStore(t)
	tenanttest.SeedFree(t, pool, "ten_a")
	tenanttest.SeedFree(t, pool, "ten_b")
	if _, err := pool.Exec(ctx, `INSERT INTO topic_rules (id, tenant_id, filter, retention_seconds, retained_allowed, max_message_size, max_msgs_per_sec)
		VALUES ('top_1', 'ten_a', 'a/#', 60, false, 100, 5), ('top_2', 'ten_a', 'a/b', NULL, true, NULL, NULL)`); err != nil {
		t.Fatal(err)
	}
	set, err := s.Load(ctx, "ten_a")
	if err != nil {
		t.Fatal(err)
	}
	got := set.Rules()
	want := []Rule{
		{ID: "top_2", Filter: "a/b", RetainedAllowed: true},
		{ID: "top_1", Filter: "a/#", HasRetention: true, Retention: time.Minute, MaxMessageSize: 100, MaxMsgsPerSec: 5},
	}
	if len(got) != 2 {
		t.Fatalf("loaded %+v", got)
	}
	for i := range want {
		g := got[i]
		g.rate, g.prefix = nil, ""
		if g != want[i] {
			t.Fatalf("rule %d = %+v, want %+v", i, g, want[i])
		}
	}
	if none, err := s.Load(ctx, "ten_none"); err != nil || none != nil {
		t.Fatalf("a tenant without rules: %v %v", none, err)
	}

	awaitListener(t, pool)
	if _, err := pool.Exec(ctx, `UPDATE topic_rules SET max_message_size = 50 WHERE id = 'top_1'; NOTIFY berth_topic_rules, 'ten_a'`); err != nil {
		t.Fatal(err)
	}
	next := awaitChange(t, changes, "ten_a", func(s *Set) bool { r := s.Match([]byte("a/x")); return r != nil && r.MaxMessageSize == 50 })
	if s.Current("ten_a") != next {
		t.Fatal("Current is not the set handed to onChange")
	}
	// The rate bucket survived the reload: its tokens are the same ones.
	if set.Match([]byte("a/x")).rate != next.Match([]byte("a/x")).rate {
		t.Fatal("a reload replaced the rate bucket")
	}

	// A tenant this node does not hold is not loaded by a notification;
	// a forgotten one no longer follows.
	s.Forget("ten_a")
	if _, err := pool.Exec(ctx, `INSERT INTO topic_rules (id, tenant_id, filter) VALUES ('top_3', 'ten_b', 'b/#'); NOTIFY berth_topic_rules, 'ten_b';
		DELETE FROM topic_rules WHERE id = 'top_2'; NOTIFY berth_topic_rules, 'ten_a'`); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-changes:
		t.Fatalf("change reported for a tenant not held: %+v", c)
	case <-time.After(300 * time.Millisecond):
	}
}

// Notifications sent while the listener is disconnected are lost; after it
// reconnects it re-reads what it holds.
func TestStoreRereadsAfterReconnect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool, changes := startStore(t)
	tenanttest.SeedFree(t, pool, "ten_a")
	if _, err := s.Load(ctx, "ten_a"); err != nil {
		t.Fatal(err)
	}
	awaitListener(t, pool)
	if _, err := pool.Exec(ctx, `INSERT INTO topic_rules (id, tenant_id, filter, retained_allowed) VALUES ('top_1', 'ten_a', 'quiet/#', false)`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`, ListenerApplicationName); err != nil {
		t.Fatal(err)
	}
	awaitChange(t, changes, "ten_a", func(s *Set) bool { r := s.Match([]byte("quiet/x")); return r != nil && !r.RetainedAllowed })
}
