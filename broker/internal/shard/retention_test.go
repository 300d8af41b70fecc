package shard

import (
	"fmt"
	"testing"
	"time"

	"berth.dev/broker/internal/store"
	"berth.dev/broker/internal/wal"
	"berth.dev/broker/packet"
)

// retentionBroker is a shard on a WAL store whose message-log segments
// hold one message each, with a persistent session "keeper" subscribed to
// r/# at QoS 1 and gone offline.
func retentionBroker(t *testing.T) (*testBroker, *store.WAL) {
	t.Helper()
	return retentionBrokerIn(t, t.TempDir())
}

func retentionBrokerIn(t *testing.T, dir string) (*testBroker, *store.WAL) {
	t.Helper()
	st, err := store.OpenWAL(store.WALOptions{Dir: dir, Fsync: wal.SyncNever, SegmentBytes: 132}) // a message record is 68 bytes; the keyed logs get 33
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	b := startBrokerWith(t, New(Options{Store: st, MessageLog: st.Messages(), SysInterval: -1, CheckpointInterval: 10 * time.Millisecond}))
	sub := dialRaw(t, b.addr, packet.Version5)
	sub.connect(sessionConnect("keeper", 3600, true))
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("r/#"), QoS: 1})
	sub.send(&packet.Disconnect{})
	waitOffline(t, b, "keeper")
	return b, st
}

func waitOffline(t *testing.T, b *testBroker, id string) {
	t.Helper()
	eventually(t, id+" offline", func() bool {
		ss, ok := b.shard.SessionStats(id)
		return ok && !ss.Connected
	})
}

// publishRange publishes r/x messages "m<from>" .. "m<to-1>" at QoS 1.
func publishRange(t *testing.T, pub *rawClient, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		id := uint16(i%60000 + 1)
		pub.send(&packet.Publish{QoS: 1, PacketID: id, Topic: []byte("r/x"), Payload: fmt.Appendf(nil, "m%03d", i)})
		if a := pub.ack(packet.TypePuback); a.PacketID != id || a.Reason != packet.CodeSuccess {
			t.Fatalf("PUBACK %d %v for %d", a.PacketID, a.Reason, id)
		}
	}
}

// expectRange reads messages "m<from>" .. "m<to-1>", in order, and
// acknowledges each.
func expectRange(t *testing.T, c *rawClient, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		p := c.publish()
		if want := fmt.Sprintf("m%03d", i); string(p.Payload) != want {
			t.Fatalf("got %q, want %q (messages %d..%d in order)", p.Payload, want, from, to-1)
		}
		c.send(&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID})
	}
}

func retentionDrops(b *testBroker) uint64 { return b.shard.Stats().Dropped[DropRetention.String()] }

// The tenant's retention_bytes bounds its message log even when an offline
// session still points into the oldest segments: those go, the session
// loses exactly the messages in them (counted as "retention" drops) and
// receives the newest ones that fit, in order. Raising the retention live
// stops the deletion.
func TestRetentionBytesDropsOldestPending(t *testing.T) {
	t.Parallel()
	b, st := retentionBroker(t)
	log := st.Messages()
	pub := v5Client(t, b, "pub")

	const n = 12
	publishRange(t, pub, 0, n)
	if got := len(log.Segments()); got != n {
		t.Fatalf("%d segments, want one per message (%d)", got, n)
	}
	recSize := log.Size() / n
	const keep = 3
	limit := keep*recSize + recSize/2 // the newest three fit, a fourth does not
	b.shard.SetRetention(Retention{Bytes: limit})
	if got := b.shard.Retention(); got.Bytes != limit || got.Age != 0 {
		t.Fatalf("Retention() = %+v after SetRetention", got)
	}
	eventually(t, "retention drops", func() bool { return retentionDrops(b) >= n-keep })
	if got := retentionDrops(b); got != n-keep {
		t.Fatalf("%d retention drops, want %d", got, n-keep)
	}
	if size := log.Size(); size > limit {
		t.Fatalf("log holds %d bytes, above the retention of %d", size, limit)
	}
	if ss, _ := b.shard.SessionStats("keeper"); ss.Dropped["retention"] != n-keep {
		t.Fatalf("keeper's drops %v, want %d retention", ss.Dropped, n-keep)
	}

	back := dialRaw(t, b.addr, packet.Version5)
	if ack := back.connect(sessionConnect("keeper", 3600, false)); !ack.SessionPresent {
		t.Fatal("session not present")
	}
	expectRange(t, back, n-keep, n)
	back.send(&packet.Disconnect{})
	waitOffline(t, b, "keeper")

	// Raised live: the log may grow again and nothing more is lost.
	b.shard.SetRetention(Retention{Bytes: 1 << 20})
	at := log.NextOffset() // message n's offset (the keeper's acknowledgements took some)
	publishRange(t, pub, n, 2*n)
	b.shard.applyRetention() // what the checkpoint does, here for certain
	if got := log.FirstOffset(); got > at {
		t.Fatalf("FirstOffset %d after the retention was raised: pending offset %d deleted", got, at)
	}
	back = dialRaw(t, b.addr, packet.Version5)
	back.connect(sessionConnect("keeper", 3600, false))
	expectRange(t, back, n, 2*n) // nothing left over from before, nothing lost
	if got := retentionDrops(b); got != n-keep {
		t.Fatalf("%d retention drops after raising the retention, want still %d", got, n-keep)
	}
}

// Segments older than the retention age go even when a session needs
// them; the active segment (the newest message) stays.
func TestRetentionAgeDropsOldPending(t *testing.T) {
	t.Parallel()
	b, st := retentionBroker(t)
	log := st.Messages()
	pub := v5Client(t, b, "pub")
	const n = 5
	publishRange(t, pub, 0, n)
	b.shard.SetRetention(Retention{Age: 50 * time.Millisecond}) // live
	eventually(t, "age retention drops", func() bool { return retentionDrops(b) >= n-1 })
	if got := retentionDrops(b); got != n-1 {
		t.Fatalf("%d retention drops, want %d", got, n-1)
	}
	if segs := log.Segments(); len(segs) != 1 {
		t.Fatalf("segments %v, want only the active one", segs)
	}
	back := dialRaw(t, b.addr, packet.Version5)
	back.connect(sessionConnect("keeper", 3600, false))
	expectRange(t, back, n-1, n)
	publishRange(t, pub, n, n+1) // the next one is new: nothing stale came first
	expectRange(t, back, n, n+1)
}

// A session that disconnects with messages still inflight (sent, not
// acknowledged) loses them to retention too, counted once, and the rest
// follow in order.
func TestRetentionDropsOfflineInflight(t *testing.T) {
	t.Parallel()
	b, st := retentionBroker(t)
	log := st.Messages()
	pub := v5Client(t, b, "pub")
	const n = 8
	publishRange(t, pub, 0, n)

	// Reconnect with a window of 2: two stored messages go out and stay
	// unacknowledged when the client leaves.
	back := dialRaw(t, b.addr, packet.Version5)
	c := sessionConnect("keeper", 3600, false)
	c.Props.Has.Set(packet.PropReceiveMaximum)
	c.Props.ReceiveMaximum = 2
	back.connect(c)
	for i := range 2 {
		if p := back.publish(); string(p.Payload) != fmt.Sprintf("m%03d", i) {
			t.Fatalf("got %q, want m%03d", p.Payload, i)
		}
	}
	back.send(&packet.Disconnect{})
	waitOffline(t, b, "keeper")

	recSize := log.Size() / n
	b.shard.SetRetention(Retention{Bytes: 4*recSize + recSize/2}) // the newest four fit
	eventually(t, "retention drops", func() bool { return retentionDrops(b) >= n-4 })
	if got := retentionDrops(b); got != n-4 {
		t.Fatalf("%d retention drops, want %d (two inflight, two stored)", got, n-4)
	}
	back = dialRaw(t, b.addr, packet.Version5)
	back.connect(sessionConnect("keeper", 3600, false))
	expectRange(t, back, n-4, n)
	publishRange(t, pub, n, n+1)
	expectRange(t, back, n, n+1)
}

// After retention deleted segments an offline session pointed into, a
// restart rebuilds its pending messages from what is left: the newest
// ones, in order, nothing stale and nothing garbled.
func TestRetentionThenRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b, st := retentionBrokerIn(t, dir)
	pub := v5Client(t, b, "pub")
	const n, keep = 10, 3
	publishRange(t, pub, 0, n)
	recSize := st.Messages().Size() / n
	b.shard.SetRetention(Retention{Bytes: keep*recSize + recSize/2})
	eventually(t, "retention drops", func() bool { return retentionDrops(b) >= n-keep })

	sh2, _ := restart(t, b.shard, st, dir, wal.SyncNever)
	b2 := startBrokerWith(t, sh2)
	back := dialRaw(t, b2.addr, packet.Version5)
	if ack := back.connect(sessionConnect("keeper", 3600, false)); !ack.SessionPresent {
		t.Fatal("session not present after the restart")
	}
	expectRange(t, back, n-keep, n)
	pub2 := v5Client(t, b2, "pub")
	publishRange(t, pub2, n, n+1)
	expectRange(t, back, n, n+1)
}
