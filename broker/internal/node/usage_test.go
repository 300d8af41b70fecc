package node

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"berth.dev/testenv"
)

// TestAdminUsageMatchesContract: GET /usage answers the fields of
// docs/contracts.md, each filled.
func TestAdminUsageMatchesContract(t *testing.T) {
	t.Parallel()
	n := startNodeWith(t, testenv.DatabaseURL(t), t.TempDir(), true)
	got := make(chan string, 10)
	sub := n.mqtt5(t, cred{"ten_a", "crd_a", allowAll, 0}, "sub", got)
	subscribe(t, sub, "u/#")
	pub := n.mqtt5(t, cred{"ten_a", "crd_a", allowAll, 0}, "pub", nil)
	for i := range 3 {
		publish(t, pub, "u/x", fmt.Sprint(i))
		expectMsg(t, got, fmt.Sprintf("u/x=%d", i))
	}
	// A delivery is counted once its write returns, which may be after
	// the subscriber has read it: poll until the third is counted.
	var code int
	var body []byte
	for deadline := time.Now().Add(5 * time.Second); ; {
		code, body = adminDo(t, n, "GET", "/admin/tenants/ten_a/usage", "")
		if code != 200 {
			t.Fatalf("usage: %d %s", code, body)
		}
		var out struct {
			MessagesOut uint64 `json:"messages_out"`
		}
		if err := json.Unmarshal(body, &out); err != nil {
			t.Fatal(err)
		}
		if out.MessagesOut >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	// docs/contracts.md, Node admin HTTP, GET /usage.
	want := []string{"bytes_in", "bytes_out", "connection_seconds", "connections", "drops", "messages_accepted", "messages_in", "messages_out", "retained", "sessions", "stored_bytes"}
	if !slices.Equal(keys, want) {
		t.Fatalf("usage fields %v, want %v", keys, want)
	}
	var u struct {
		MessagesIn        uint64            `json:"messages_in"`
		MessagesAccepted  uint64            `json:"messages_accepted"`
		MessagesOut       uint64            `json:"messages_out"`
		BytesIn           uint64            `json:"bytes_in"`
		BytesOut          uint64            `json:"bytes_out"`
		ConnectionSeconds float64           `json:"connection_seconds"`
		StoredBytes       int64             `json:"stored_bytes"`
		Drops             map[string]uint64 `json:"drops"`
		Connections       int64             `json:"connections"`
	}
	if err := json.Unmarshal(body, &u); err != nil {
		t.Fatal(err)
	}
	if u.MessagesIn != 3 || u.MessagesAccepted != 3 || u.MessagesOut != 3 || u.BytesIn == 0 || u.BytesOut == 0 || u.ConnectionSeconds <= 0 ||
		u.StoredBytes <= 0 || u.Drops == nil || u.Connections != 2 {
		t.Fatalf("usage %s", body)
	}
}

// TestStoredBytesFlushed: the tenant's log size on disk is flushed as its
// stored_bytes, a level that follows the log.
func TestStoredBytesFlushed(t *testing.T) {
	t.Parallel()
	n := startNodeWith(t, testenv.DatabaseURL(t), t.TempDir(), true)
	ctx := context.Background()
	pub := n.mqtt5(t, cred{"ten_a", "crd_a", allowAll, 0}, "pub", nil)
	stored := func() int64 {
		t.Helper()
		if err := n.flusher.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		var b int64
		if err := n.pool.QueryRow(ctx, `SELECT coalesce(max(stored_bytes), 0) FROM usage WHERE tenant_id = 'ten_a' AND node_id = 'node-test'`).Scan(&b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	payload := strings.Repeat("s", 1000)
	for range 10 {
		publish(t, pub, "s/x", payload)
	}
	first := stored()
	if first < 10*1000 {
		t.Fatalf("stored_bytes %d after 10 QoS 1 messages of 1000 bytes in the log, want at least 10000", first)
	}
	tn, _ := n.lookup("ten_a")
	if size, msgs := tn.store.Size(), tn.store.Messages().Size(); first > size || first < msgs {
		t.Fatalf("stored_bytes %d, the logs are %d bytes (messages %d)", first, size, msgs)
	}
	for range 10 {
		publish(t, pub, "s/x", payload)
	}
	if second := stored(); second < first+10*1000 {
		t.Fatalf("stored_bytes %d after 10 more messages, was %d", second, first)
	}
}
