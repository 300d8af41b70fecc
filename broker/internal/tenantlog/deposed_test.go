package tenantlog

import (
	"context"
	"testing"
	"time"
)

// waitUntil polls cond every 5 ms until it holds or d passes.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestDeposedLeaderNeverAcknowledgesAnotherLeadersRecord: leader A names
// offset X for a record and proposes it, then is cut off from both
// followers before the entry commits. B is elected and commits its own
// record at X. When the partition heals, A applies B's entries, so its
// message log passes X, but the record there is not the one A's shard
// wrote: neither the WaitDurable that was waiting during the partition nor
// one asked after A caught up may report X durable (the shard would send a
// PUBACK for a message no node holds), and Durable stays at or below X.
func TestDeposedLeaderNeverAcknowledgesAnotherLeadersRecord(t *testing.T) {
	// A proposal outlives the partition: the leadership ends only by what
	// the group applies, as when leadLoop has not yet noticed.
	logs, groups, hosts := replicaSet(t, Options{ProposeTimeout: time.Minute})
	// leader is a node (not not) that leads with another node agreeing.
	leader := func(not int) int {
		for i, g := range groups {
			if i == not || g.Leader() != uint64(i+1) {
				continue
			}
			for j, o := range groups {
				if j != i && j != not && o.Leader() == uint64(i+1) {
					return i
				}
			}
		}
		return -1
	}
	a := -1
	waitUntil(t, 10*time.Second, "a leader", func() bool { a = leader(-1); return a >= 0 })
	la := logs[a]
	if err := la.Lead(context.Background(), groups[a]); err != nil {
		t.Fatal(err)
	}
	off, err := la.Append([]byte("k"), []byte("committed"), 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := la.WaitDurable(off); err != nil {
		t.Fatal(err)
	}

	var others []uint64
	for i := range hosts {
		if i != a {
			others = append(others, uint64(i+1))
			hosts[i].Partition(uint64(a + 1))
		}
	}
	hosts[a].Partition(others...)
	x, err := la.Append([]byte("k"), []byte("lost"), 1)
	if err != nil {
		t.Fatal(err)
	}
	inFlight := make(chan error, 1)
	go func() { inFlight <- la.WaitDurable(x) }()

	b := -1
	waitUntil(t, 10*time.Second, "a leader among the majority", func() bool { b = leader(a); return b >= 0 })
	lb := logs[b]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := lb.Lead(ctx, groups[b]); err != nil {
		t.Fatal(err)
	}
	xb, err := lb.Append([]byte("k"), []byte("winner"), 1)
	if err != nil {
		t.Fatal(err)
	}
	if xb != x {
		t.Fatalf("the new leader named offset %d, the old one %d: the test needs both at the same offset", xb, x)
	}
	if err := lb.WaitDurable(xb); err != nil {
		t.Fatal(err)
	}

	for _, h := range hosts {
		h.Partition()
	}
	waitUntil(t, 10*time.Second, "the old leader to apply the new leader's record", func() bool {
		return la.Store().Messages().NextOffset() > x
	})
	if got := readAt(t, la, x); got != "winner" {
		t.Fatalf("the old leader's log holds %q at %d, want the new leader's record", got, x)
	}
	select {
	case err := <-inFlight:
		if err == nil {
			t.Fatalf("WaitDurable(%d) on the deposed leader returned nil: it would acknowledge a record the group overwrote", x)
		}
		t.Logf("waiting during the partition: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("WaitDurable on the deposed leader still waits after it applied another leader's record at its offset")
	}
	if err := la.WaitDurable(x); err == nil {
		t.Fatalf("WaitDurable(%d) asked after catching up returned nil", x)
	}
	if d := la.Durable(); d > x {
		t.Fatalf("Durable() = %d on the deposed leader, past its lost record at %d", d, x)
	}
	if err := la.WaitDurable(off); err != nil {
		t.Errorf("a record committed under the old leadership: %v", err)
	}
}

// readAt is the payload of the message-log record at off in l's store.
func readAt(t *testing.T, l *Log, off uint64) string {
	t.Helper()
	r, err := l.Store().Messages().ReadFrom(off)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rec, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	return string(rec.Payload)
}
