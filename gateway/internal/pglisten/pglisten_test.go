package pglisten

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"berth.dev/testenv"
)

func TestNotifyAndResetOnReconnect(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	got := make(chan string, 16)
	resets := make(chan struct{}, 16)
	l := New(pool, Options{
		Channels: []string{"chan_a", "chan_b"},
		Reset: func(ctx context.Context, conn *pgx.Conn) error {
			// Mark the backend so the test can find and kill it.
			_, err := conn.Exec(ctx, "SET application_name = 'pglisten_test'")
			resets <- struct{}{}
			return err
		},
		Notify:   func(n *pgconn.Notification) { got <- n.Channel + ":" + n.Payload },
		RetryMin: 10 * time.Millisecond,
	})
	if err := l.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	expect := func(want string) {
		t.Helper()
		select {
		case g := <-got:
			if g != want {
				t.Fatalf("notification %q, want %q", g, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no notification %q within 5 s", want)
		}
	}
	<-resets
	for _, tc := range []struct{ ch, payload string }{{"chan_a", "1"}, {"chan_b", "2"}} {
		if _, err := pool.Exec(ctx, "SELECT pg_notify($1, $2)", tc.ch, tc.payload); err != nil {
			t.Fatal(err)
		}
		expect(tc.ch + ":" + tc.payload)
	}
	if _, err := pool.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'pglisten_test'"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-resets:
	case <-time.After(5 * time.Second):
		t.Fatal("no Reset after the listening backend was killed")
	}
	for deadline := time.Now().Add(5 * time.Second); l.Resets() != 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Resets = %d, want 2", l.Resets())
		}
	}
	if _, err := pool.Exec(ctx, "SELECT pg_notify('chan_a', 'after')"); err != nil {
		t.Fatal(err)
	}
	expect("chan_a:after")
}
