package registry

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"berth.dev/testenv"
)

func TestRegisterHeartbeatAndDeregister(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.Postgres(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	n := Node{ID: "node-1", MQTTAddr: "127.0.0.1:7883", AdminAddr: "127.0.0.1:7880", Capacity: 100}

	r, err := Register(ctx, pool, n, 20*time.Millisecond, log)
	if err != nil {
		t.Fatal(err)
	}
	live := func() bool {
		var ok bool
		if err := pool.QueryRow(ctx, `SELECT heartbeat_at > now() - interval '30 seconds' AND NOT draining FROM nodes WHERE id = 'node-1'`).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !live() {
		t.Fatal("registered node is not live")
	}
	var first time.Time
	if err := pool.QueryRow(ctx, `SELECT heartbeat_at FROM nodes WHERE id='node-1'`).Scan(&first); err != nil {
		t.Fatal(err)
	}
	r.Start()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var hb time.Time
		if err := pool.QueryRow(ctx, `SELECT heartbeat_at FROM nodes WHERE id='node-1'`).Scan(&hb); err != nil {
			t.Fatal(err)
		}
		if hb.After(first) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("heartbeat never advanced")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := r.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if live() {
		t.Fatal("node still live after Shutdown")
	}
	// Restarting under the same id takes the row back.
	n.AdminAddr = "127.0.0.1:17880"
	if _, err := Register(ctx, pool, n, time.Second, log); err != nil {
		t.Fatal(err)
	}
	var addr string
	if err := pool.QueryRow(ctx, `SELECT admin_addr FROM nodes WHERE id='node-1'`).Scan(&addr); err != nil || addr != n.AdminAddr || !live() {
		t.Fatalf("re-registered node: addr %q live %v err %v", addr, live(), err)
	}
}

// TestPublicHost: the node's public host is stored with its row and
// replaced when the node registers again (restarted with another value).
func TestPublicHost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.Postgres(t)
	log := slog.New(slog.DiscardHandler)
	n := Node{ID: "node-1", MQTTAddr: "127.0.0.1:7883", AdminAddr: "127.0.0.1:7880", Capacity: 100, PublicHost: "node-1.example.com"}
	stored := func() string {
		var h string
		if err := pool.QueryRow(ctx, `SELECT public_host FROM nodes WHERE id = 'node-1'`).Scan(&h); err != nil {
			t.Fatal(err)
		}
		return h
	}
	for _, host := range []string{"node-1.example.com", "203.0.113.7", ""} {
		n.PublicHost = host
		if _, err := Register(ctx, pool, n, time.Second, log); err != nil {
			t.Fatal(err)
		}
		if got := stored(); got != host {
			t.Fatalf("public_host %q, want %q", got, host)
		}
	}
}
