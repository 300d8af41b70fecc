package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"berth.dev/testenv"
)

// setRetentionBytes changes the tenant's retention_bytes the way the API
// does (UPDATE + NOTIFY) and waits until the shard has it; the listener
// may attach after the first NOTIFY, so the change is announced again.
func (n *testNode) setRetentionBytes(t *testing.T, tenantID string, v int64) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := n.pool.Exec(ctx, `UPDATE quotas SET retention_bytes = $1 WHERE tenant_id = $2`, v, tenantID); err != nil {
			t.Fatal(err)
		}
		if _, err := n.pool.Exec(ctx, `SELECT pg_notify('berth_quotas', $1)`, tenantID); err != nil {
			t.Fatal(err)
		}
		if tn, ok := n.lookup(tenantID); ok && tn.sh.Retention().Bytes == v {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("retention_bytes=%d never applied", v)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Lowering retention_bytes live (UPDATE quotas + NOTIFY) bounds the
// tenant's message log at once: the oldest segments go although an
// offline session still needs them, the lost messages are counted as
// "retention" drops, and the session gets the newest ones, in order.
func TestRetentionBytesAppliesLive(t *testing.T) {
	t.Parallel()
	url, dir := testenv.DatabaseURL(t), t.TempDir()
	n := startNodeWith(t, url, dir, true)
	// Before the shard opens: 256 KiB of retention (32 KiB segments) and
	// rates that do not throttle the test's publisher.
	if _, err := n.pool.Exec(context.Background(), `UPDATE quotas SET retention_bytes = 262144,
		client_bytes_per_sec = 1073741824, max_bytes_per_sec = 1073741824,
		client_msgs_per_sec = 100000, max_msgs_per_sec = 100000 WHERE tenant_id = 'ten_a'`); err != nil {
		t.Fatal(err)
	}
	c := cred{"ten_a", "crd_a", allowAll, 0}
	got := make(chan string, 64)
	keeper := func(clean bool) *paho.Client {
		t.Helper()
		cl := paho.NewClient(paho.ClientConfig{Conn: n.dial(t, c, nil), OnPublishReceived: []func(paho.PublishReceived) (bool, error){
			func(p paho.PublishReceived) (bool, error) {
				got <- string(p.Packet.Payload[:3])
				return true, nil
			},
		}})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		expiry := uint32(3600)
		ack, err := cl.Connect(ctx, &paho.Connect{ClientID: "keeper", KeepAlive: 30, CleanStart: clean, Username: c.id, UsernameFlag: true,
			Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}})
		if err != nil || ack.ReasonCode != 0 {
			t.Fatalf("connect keeper: %v %v", ack, err)
		}
		return cl
	}
	k := keeper(true)
	subscribe(t, k, "r/#")
	_ = k.Disconnect(&paho.Disconnect{})
	tn, ok := n.lookup("ten_a")
	if !ok {
		t.Fatal("tenant not open")
	}
	poll(t, 10*time.Second, "keeper offline", func() bool {
		ss, ok := tn.sh.SessionStats("keeper")
		return ok && !ss.Connected
	})

	pub := n.mqtt5(t, c, "pub", nil)
	const total = 24 // 24 × 8 KiB: fits the 256 KiB
	for i := range total {
		payload := append(fmt.Appendf(nil, "%03d", i), bytes.Repeat([]byte{'x'}, 8<<10)...)
		if rc, err := publishQoS1(t, pub, "r/x", payload, false); err != nil || rc >= 0x80 {
			t.Fatalf("publish %d: %#x %v", i, rc, err)
		}
	}
	if d := tn.sh.Stats().Dropped["retention"]; d != 0 {
		t.Fatalf("%d retention drops within the quota", d)
	}

	n.setRetentionBytes(t, "ten_a", 64<<10)
	var dropped uint64
	poll(t, 10*time.Second, "retention drops", func() bool {
		dropped = tn.sh.Stats().Dropped["retention"]
		return dropped > 0
	})
	t.Logf("%d of %d messages dropped by retention", dropped, total)
	if dropped >= total {
		t.Fatalf("%d of %d messages dropped: the active segment must stay", dropped, total)
	}
	k = keeper(false)
	t.Cleanup(func() { _ = k.Disconnect(&paho.Disconnect{}) })
	for i := int(dropped); i < total; i++ {
		select {
		case m := <-got:
			if want := fmt.Sprintf("%03d", i); m != want {
				t.Fatalf("received message %s, want %s (the newest %d in order after %d dropped)", m, want, total-int(dropped), dropped)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("message %03d not received", i)
		}
	}
	if d := tn.sh.Stats().Dropped["retention"]; d != dropped {
		t.Fatalf("retention drops moved from %d to %d", dropped, d)
	}
	code, body := adminDo(t, n, "GET", "/admin/tenants/ten_a/usage", "")
	var usage struct {
		Drops map[string]uint64 `json:"drops"`
	}
	if err := json.Unmarshal(body, &usage); code != 200 || err != nil {
		t.Fatalf("usage: %d %s %v", code, body, err)
	}
	if d := usage.Drops["retention"]; d != dropped {
		t.Fatalf("usage shows %d retention drops, want %d", d, dropped)
	}
}
