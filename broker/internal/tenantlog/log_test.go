package tenantlog

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"berth.dev/broker/internal/replica"
	"berth.dev/broker/internal/store"
	"berth.dev/broker/internal/wal"
)

func openStore(t *testing.T, dir string) *store.WAL {
	t.Helper()
	st, err := store.OpenWAL(store.WALOptions{Dir: dir, Fsync: wal.SyncNever})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// entry encodes message records at offsets from, from+1, ...
func entry(from uint64, payloads ...string) []byte {
	b := []byte{entryVersion}
	for i, p := range payloads {
		b = append(b, kindMessage)
		b = binary.BigEndian.AppendUint64(b, from+uint64(i))
		b = binary.BigEndian.AppendUint32(b, 1)
		b = appendBytes32(b, []byte("k"))
		b = appendBytes32(b, []byte(p))
	}
	return b
}

// TestApplyIsIdempotentAndChecksOffsets: an entry applied again (the group
// replays after a restart) leaves the log as it was; an entry whose first
// record lies past the log's end is corruption; a snapshot the store is
// behind is ErrBehind, one it holds restores.
func TestApplyIsIdempotentAndChecksOffsets(t *testing.T) {
	l := New(openStore(t, t.TempDir()), Options{})
	for range 2 {
		if err := l.Apply(2, entry(0, "a", "b")); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Apply(3, entry(1, "b", "c")); err != nil { // overlaps: only c is new
		t.Fatal(err)
	}
	if got := l.msgs.NextOffset(); got != 3 {
		t.Fatalf("log at %d after replays, want 3", got)
	}
	if err := l.Apply(4, entry(5, "x")); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a gap applied: %v", err)
	}
	if err := l.Apply(4, []byte{9}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("an unknown version applied: %v", err)
	}
	snap, err := l.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Restore(snap); err != nil {
		t.Fatalf("restoring its own snapshot: %v", err)
	}
	fresh := New(openStore(t, t.TempDir()), Options{})
	if err := fresh.Restore(snap); !errors.Is(err, ErrBehind) {
		t.Fatalf("an empty store restored a snapshot at 3: %v", err)
	}
}

// TestStopFailsWaitersAndWrites: on a one-node group (it elects itself) a
// leading Log commits appends and keyed records; after Stop nothing more
// is taken or acknowledged.
func TestStopFailsWaitersAndWrites(t *testing.T) {
	h, err := replica.New(replica.Config{NodeID: 1, Listen: "127.0.0.1:0", Secret: []byte("0123456789abcdef"), Dir: t.TempDir(),
		Fsync: wal.SyncAlways, TickInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	st := openStore(t, t.TempDir())
	l := New(st, Options{ProposeTimeout: 2 * time.Second})
	g, err := h.OpenGroup(7, []uint64{1}, l)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for g.Leader() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := l.Lead(context.Background(), g); err != nil {
		t.Fatal(err)
	}
	off, err := l.Append([]byte("k"), []byte("v"), 1)
	if err != nil || off != 0 {
		t.Fatalf("append: %d %v", off, err)
	}
	if err := l.WaitDurable(off); err != nil {
		t.Fatal(err)
	}
	if err := st.SaveSession(&store.Session{ClientID: "c1", ExpiryInterval: 60}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	_ = st.Sessions(func(s *store.Session) bool { ids = append(ids, s.ClientID); return true })
	if len(ids) != 1 || ids[0] != "c1" || st.Messages().NextOffset() != 1 {
		t.Fatalf("store after commits: sessions %v, log at %d", ids, st.Messages().NextOffset())
	}
	l.Stop()
	if _, err := l.Append([]byte("k"), []byte("v2"), 1); !errors.Is(err, ErrNotLeading) {
		t.Fatalf("append after Stop: %v", err)
	}
	if err := l.WaitDurable(1); !errors.Is(err, ErrNotLeading) {
		t.Fatalf("wait after Stop: %v", err)
	}
	if err := st.SaveSession(&store.Session{ClientID: "c2"}); !errors.Is(err, ErrNotLeading) {
		t.Fatalf("session saved after Stop: %v", err)
	}
	if got := st.Messages().NextOffset(); got != 1 {
		t.Fatalf("log at %d after Stop, want 1", got)
	}
}
