package tenantlog

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"berth.dev/broker/internal/replica"
	"berth.dev/broker/internal/store"
	"berth.dev/broker/internal/wal"
)

// replicaSet is a tenant's group on three in-process hosts (real TCP),
// each with its own store of 1 KiB message-log segments and a Log made
// with opts.
func replicaSet(t *testing.T, opts Options) ([]*Log, []*replica.Group, []*replica.Host) {
	t.Helper()
	var lns []net.Listener
	for range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
	}
	addrs := make([]string, 3)
	for i, ln := range lns {
		addrs[i] = ln.Addr().String()
		ln.Close()
	}
	var logs []*Log
	var groups []*replica.Group
	var hosts []*replica.Host
	for i := range 3 {
		h, err := replica.New(replica.Config{NodeID: uint64(i + 1), Listen: addrs[i], Secret: []byte("0123456789abcdef"),
			Dir: t.TempDir(), Fsync: wal.SyncNever, TickInterval: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Close() })
		for j := range 3 {
			if j != i {
				h.AddPeer(uint64(j+1), addrs[j])
			}
		}
		st, err := store.OpenWAL(store.WALOptions{Dir: t.TempDir(), Fsync: wal.SyncNever, SegmentBytes: 1024})
		if err != nil {
			t.Fatal(err)
		}
		l := New(st, opts)
		t.Cleanup(func() { _ = l.Close() })
		g, err := h.OpenGroup(7, []uint64{1, 2, 3}, l)
		if err != nil {
			t.Fatal(err)
		}
		logs, groups, hosts = append(logs, l), append(groups, g), append(hosts, h)
	}
	return logs, groups, hosts
}

// TestRemovalAppliesOnEveryReplica: the leader's decision to delete
// message-log segments (retention, segments no session needs) goes
// through the group: every replica, followers too, deletes the segments
// below the offset, so their disks stay bounded like the leader's.
func TestRemovalAppliesOnEveryReplica(t *testing.T) {
	logs, groups, _ := replicaSet(t, Options{ProposeTimeout: 2 * time.Second})
	var lead int
	deadline := time.Now().Add(10 * time.Second)
	for lead = -1; lead < 0; {
		for i, g := range groups {
			if g.Leader() == uint64(i+1) {
				lead = i
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
		time.Sleep(5 * time.Millisecond)
	}
	l := logs[lead]
	if err := l.Lead(context.Background(), groups[lead]); err != nil {
		t.Fatal(err)
	}
	// Waves of 20 records, each committed before the next: one entry, one
	// append batch each, so the 1 KiB segments roll between waves.
	var last, lastWave uint64
	for i := range 200 {
		off, err := l.Append([]byte("t"), fmt.Appendf(nil, "payload %04d ........................................", i), 1)
		if err != nil {
			t.Fatal(err)
		}
		if i%20 == 0 {
			lastWave = off
		}
		if last = off; i%20 == 19 {
			if err := l.WaitDurable(last); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := l.RemoveBefore(last+1, time.Time{}); err != nil {
		t.Fatal(err)
	}
	// One more record after the removal: once a replica has it, it has
	// applied the removal before it.
	off, err := l.Append([]byte("t"), []byte("after"), 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.WaitDurable(off); err != nil {
		t.Fatal(err)
	}
	for i, r := range logs {
		deadline := time.Now().Add(10 * time.Second)
		for r.Store().Messages().NextOffset() <= off {
			if time.Now().After(deadline) {
				t.Fatalf("replica %d never applied the record after the removal", i+1)
			}
			time.Sleep(5 * time.Millisecond)
		}
		m := r.Store().Messages()
		if first := m.FirstOffset(); first < lastWave { // the active segment stays
			t.Fatalf("replica %d still holds its message log from offset %d (%d bytes); removal was below %d", i+1, first, m.Size(), last+1)
		}
		t.Logf("replica %d: message log from %d, %d bytes, %d segment(s)", i+1, m.FirstOffset(), m.Size(), len(m.Segments()))
	}
}
