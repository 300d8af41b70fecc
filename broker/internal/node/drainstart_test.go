package node

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/broker/internal/wal"
	"berth.dev/testenv"
)

// TestDrainDuringStart: the admin listener serves before Start has brought
// replication up, so POST /admin/drain may come while startReplication
// sets the node's replication (run under -race: the handler must not read
// it unsynchronised). Until replication is up a replicating node answers
// 503 with Retry-After, never "does not replicate" (409); once it is up,
// the drain answers 200 (the node leads nothing: its only peer is down).
func TestDrainDuringStart(t *testing.T) {
	t.Parallel()
	url := testenv.DatabaseURL(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	for i := range 8 { // groups to open: a longer start
		seedTenant(t, pool, fmt.Sprintf("ten_ds%d", i))
		setPlan(t, pool, fmt.Sprintf("ten_ds%d", i), "pro") // two voters: one node is down, no group has a leader
	}
	ports := freePorts(t, 3)
	n, err := New(Config{
		ID: "node-ds1", InternalListen: "127.0.0.1:0", AdminListen: ports[0], DataDir: t.TempDir(), Fsync: wal.SyncAlways,
		DatabaseURL: url, ProxySecret: testSecret, NodeToken: testToken,
		UsageInterval: time.Hour, HeartbeatInterval: time.Hour,
		Peers: []Peer{{ID: "node-ds2", Addr: ports[2]}}, PeerListen: ports[1], PeerSecret: testSecret,
		RaftTick: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() { started <- n.Start(context.Background()) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = n.Shutdown(ctx)
	})

	post := func() (int, string) {
		req, _ := http.NewRequest("POST", "http://"+ports[0]+"/admin/drain?timeout=5s", nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error() // not listening yet
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "" {
			t.Errorf("503 without Retry-After: %s", b)
		}
		return resp.StatusCode, string(b)
	}
	counts := map[int]int{}
	deadline := time.Now().Add(30 * time.Second)
	for up := false; !up; {
		select {
		case err := <-started:
			if err != nil {
				t.Fatal(err)
			}
			up = true
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("Start did not return within 30 s")
		}
		code, body := post()
		counts[code]++
		if code != 0 && code != http.StatusOK && code != http.StatusServiceUnavailable {
			t.Fatalf("drain while starting: %d %s", code, body)
		}
	}
	code, body := post()
	if code != http.StatusOK {
		t.Fatalf("drain once started: %d %s", code, body)
	}
	t.Logf("answers while Start ran: %d refused connections, %d × 503 starting, %d × 200", counts[0], counts[http.StatusServiceUnavailable], counts[http.StatusOK])
}
