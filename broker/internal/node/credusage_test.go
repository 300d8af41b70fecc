package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// TestUsageByCredential: two credentials publishing different counts, and a
// third subscribing, each get their own messages and bytes in the flushed
// usage_credentials rows, and together they account for every byte of the
// tenant's usage (no HTTP publish here). A connection that ended before the
// flush still counts.
func TestUsageByCredential(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	ctx := context.Background()
	got := make(chan string, 20)
	sub := n.mqtt5(t, cred{"ten_a", "crd_sub", allowAll, 0}, "sub", got)
	subscribe(t, sub, "c/#")
	pubA := n.mqtt5(t, cred{"ten_a", "crd_a", allowAll, 0}, "pub-a", nil)
	pubB := n.mqtt5(t, cred{"ten_a", "crd_b", allowAll, 0}, "pub-b", nil)
	for i := range 5 {
		publish(t, pubA, "c/a", fmt.Sprint(i))
		expectMsg(t, got, fmt.Sprintf("c/a=%d", i))
	}
	for i := range 2 {
		publish(t, pubB, "c/b", fmt.Sprint(i))
		expectMsg(t, got, fmt.Sprintf("c/b=%d", i))
	}
	// crd_b's connection ends before the flush: its traffic still counts.
	_ = pubB.Disconnect(&paho.Disconnect{})
	tn, _ := n.lookup("ten_a")
	deadline := time.Now().Add(5 * time.Second)
	for {
		tn.mu.Lock()
		live := len(tn.conns["crd_b"])
		tn.mu.Unlock()
		if live == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("crd_b's connection still open after 5 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := n.flusher.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	type traffic struct{ msgsIn, msgsOut, bytesIn, bytesOut int64 }
	read := func() map[string]traffic {
		t.Helper()
		rows, err := n.pool.Query(ctx, `SELECT credential_id, sum(messages_in)::bigint, sum(messages_out)::bigint, sum(bytes_in)::bigint, sum(bytes_out)::bigint
			FROM usage_credentials WHERE tenant_id = 'ten_a' AND node_id = 'node-test' GROUP BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]traffic{}
		for rows.Next() {
			var id string
			var tr traffic
			if err := rows.Scan(&id, &tr.msgsIn, &tr.msgsOut, &tr.bytesIn, &tr.bytesOut); err != nil {
				t.Fatal(err)
			}
			out[id] = tr
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	byCred := read()
	for _, c := range []struct {
		id              string
		msgsIn, msgsOut int64
	}{{"crd_a", 5, 0}, {"crd_b", 2, 0}, {"crd_sub", 0, 7}} {
		tr := byCred[c.id]
		if tr.msgsIn != c.msgsIn || tr.msgsOut != c.msgsOut || tr.bytesIn == 0 || tr.bytesOut == 0 {
			t.Errorf("%s: %+v, want %d messages in, %d out and some bytes both ways", c.id, tr, c.msgsIn, c.msgsOut)
		}
	}
	if len(byCred) != 3 {
		t.Errorf("credentials %v, want crd_a, crd_b, crd_sub", byCred)
	}
	if a, b := byCred["crd_a"], byCred["crd_b"]; a.bytesIn <= b.bytesIn {
		t.Errorf("crd_a read %d bytes for 5 messages, crd_b %d for 2 (and a DISCONNECT)", a.bytesIn, b.bytesIn)
	}
	var sum traffic
	for _, tr := range byCred {
		sum.msgsIn += tr.msgsIn
		sum.msgsOut += tr.msgsOut
		sum.bytesIn += tr.bytesIn
		sum.bytesOut += tr.bytesOut
	}
	var tenant traffic
	if err := n.pool.QueryRow(ctx, `SELECT sum(messages_in)::bigint, sum(messages_out)::bigint, sum(bytes_in)::bigint, sum(bytes_out)::bigint
		FROM usage WHERE tenant_id = 'ten_a' AND node_id = 'node-test'`).Scan(&tenant.msgsIn, &tenant.msgsOut, &tenant.bytesIn, &tenant.bytesOut); err != nil {
		t.Fatal(err)
	}
	if sum != tenant {
		t.Errorf("credentials sum to %+v, the tenant's usage is %+v", sum, tenant)
	}
	// A second flush with nothing new adds nothing.
	if err := n.flusher.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if again := read(); again["crd_a"] != byCred["crd_a"] {
		t.Errorf("after a second flush crd_a = %+v, was %+v", again["crd_a"], byCred["crd_a"])
	}
}
