package shard

import (
	"context"
	"fmt"
	"testing"
	"time"

	"berth.dev/broker/internal/store"
	"berth.dev/broker/internal/topic"
	"berth.dev/broker/internal/wal"
	"berth.dev/broker/packet"
)

// openWALStore opens a WAL store in dir, closed at the end of the test
// (after every shard using it, whose cleanups are registered later).
func openWALStore(t testing.TB, dir string, policy wal.Policy) *store.WAL {
	t.Helper()
	st, err := store.OpenWAL(store.WALOptions{Dir: dir, Fsync: policy, SegmentBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// newDurableShard is a shard on a WAL store.
func newDurableShard(st *store.WAL) *Shard {
	return New(Options{Store: st, MessageLog: st.Messages(), SysInterval: -1, CheckpointInterval: 20 * time.Millisecond})
}

// restart shuts sh down and closes st, then opens both again on dir.
func restart(t *testing.T, sh *Shard, st *store.WAL, dir string, policy wal.Policy) (*Shard, *store.WAL) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := sh.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st2 := openWALStore(t, dir, policy)
	return newDurableShard(st2), st2
}

// TestDurableSessionAcrossRestart: a persistent session's subscription,
// the QoS 1 messages queued while it was offline and a retained message
// survive a restart of the shard on its WAL store, for every fsync policy;
// the queued messages come back in order (their payloads straight from
// the log file).
func TestDurableSessionAcrossRestart(t *testing.T) {
	t.Parallel()
	for _, policy := range []wal.Policy{wal.SyncAlways, wal.SyncInterval, wal.SyncNever} {
		t.Run(policy.String(), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			st := openWALStore(t, dir, policy)
			b := startBrokerWith(t, newDurableShard(st))

			sub := dialRaw(t, b.addr, packet.Version5)
			sub.connect(sessionConnect("keeper", 3600, true))
			sub.subscribe(1, packet.Properties{SubscriptionIDs: []uint32{7}}, packet.Subscription{Filter: []byte("d/#"), QoS: 1})
			sub.send(&packet.Disconnect{})
			eventually(t, "keeper offline", func() bool {
				ss, ok := b.shard.SessionStats("keeper")
				return ok && !ss.Connected
			})

			pub := v5Client(t, b, "pub")
			const n = 20
			for i := range n {
				pub.send(&packet.Publish{QoS: 1, PacketID: uint16(i + 1), Topic: []byte("d/x"), Payload: fmt.Appendf(nil, "m%03d", i)})
				if a := pub.ack(packet.TypePuback); a.PacketID != uint16(i+1) {
					t.Fatalf("PUBACK %d for %d", a.PacketID, i+1)
				}
			}
			pub.send(&packet.Publish{Retain: true, QoS: 1, PacketID: 100, Topic: []byte("r/t"), Payload: []byte("kept")})
			pub.ack(packet.TypePuback)
			if ss, _ := b.shard.SessionStats("keeper"); ss.Queued != 0 {
				t.Fatalf("offline session holds %d messages in memory, want 0 (offsets only)", ss.Queued)
			}

			sh2, _ := restart(t, b.shard, st, dir, policy)
			b2 := startBrokerWith(t, sh2)
			again := dialRaw(t, b2.addr, packet.Version5)
			if ack := again.connect(sessionConnect("keeper", 3600, false)); !ack.SessionPresent {
				t.Fatal("session not present after restart")
			}
			for i := range n {
				p := again.publish()
				if want := fmt.Sprintf("m%03d", i); string(p.Payload) != want || string(p.Topic) != "d/x" {
					t.Fatalf("message %d: got %q on %q, want %q", i, p.Payload, p.Topic, want)
				}
				if len(p.Props.SubscriptionIDs) != 1 || p.Props.SubscriptionIDs[0] != 7 {
					t.Fatalf("subscription ids %v", p.Props.SubscriptionIDs)
				}
				again.send(&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID})
			}
			late := v5Client(t, b2, "late")
			late.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("r/#"), QoS: 1})
			if p := late.publish(); string(p.Payload) != "kept" || !p.Retain {
				t.Fatalf("retained after restart: %q retain %v", p.Payload, p.Retain)
			}
		})
	}
}

// TestAlwaysAcksPipelined: under SyncAlways a publisher that sends many
// QoS 1 messages without waiting gets every PUBACK, in order; the reader
// is not blocked per message by the fsync (far fewer fsyncs than messages
// would be needed otherwise, which the group commit count shows).
func TestAlwaysAcksPipelined(t *testing.T) {
	t.Parallel()
	st := openWALStore(t, t.TempDir(), wal.SyncAlways)
	b := startBrokerWith(t, newDurableShard(st))
	pub := v5Client(t, b, "burst")
	const n = 500
	var batch []byte
	for i := range n {
		var err error
		batch, err = (&packet.Publish{QoS: 1, PacketID: uint16(i + 1), Topic: []byte("b/x"), Payload: []byte("p")}).Append(batch, packet.Version5)
		if err != nil {
			t.Fatal(err)
		}
	}
	pub.sendBytes(batch)
	for i := range n {
		if a := pub.ack(packet.TypePuback); a.PacketID != uint16(i+1) {
			t.Fatalf("ack %d: id %d, want %d [MQTT-4.6.0-2]", i, a.PacketID, i+1)
		}
	}
	if d := st.Messages().Durable(); d < n {
		t.Fatalf("durable below %d after every PUBACK, want >= %d", d, n)
	}
}

// loggedFanout is offlineFanout on a shard with a message log (SyncNever),
// so every QoS 1 publish is appended and queued as a log offset.
func loggedFanout(tb testing.TB, n int) *Shard {
	tb.Helper()
	st, err := store.OpenWAL(store.WALOptions{Dir: tb.TempDir(), Fsync: wal.SyncNever})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = st.Close() })
	s := New(Options{Store: st, MessageLog: st.Messages(), SysInterval: -1, MaxQueuedMessages: 1 << 20})
	addOfflineSessions(tb, s, n, func(i int) uint32 { return uint32(i + 1) })
	return s
}

// drainStored leaves one stored entry per session, as a writer keeping up
// would (an emptied ring gives its memory back, by design).
func drainStored(s *Shard) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, sess := range s.sessions {
		sess.mu.Lock()
		for sess.stored.len() > 1 {
			sess.stored.pop()
		}
		sess.mu.Unlock()
	}
}

// TestLoggedRouteAllocations pins the durable publish path at zero
// allocations per message: encoding the record key, appending to the log
// and queueing an offset in each of 100 offline sessions.
func TestLoggedRouteAllocations(t *testing.T) {
	s := loggedFanout(t, 100)
	m := newSimpleMessage("bench/x", make([]byte, 64), 1, false, time.Now())
	var mt topic.Matches
	for range 3 {
		m.off = 0
		if n := s.publish(m, &mt); n != 100 {
			t.Fatalf("routed to %d sessions", n)
		}
		drainStored(s)
	}
	before := s.log.NextOffset()
	allocs := testing.AllocsPerRun(200, func() {
		m.off = 0
		s.publish(m, &mt)
		drainStored(s)
	})
	if allocs != 0 {
		t.Fatalf("logging and routing one message to 100 sessions allocates %v times", allocs)
	}
	if got := s.log.NextOffset() - before; got != 201 {
		t.Fatalf("%d records appended, want 201", got)
	}
}

// BenchmarkLoggedRoute measures a QoS 1 publish appended to the log
// (SyncNever) and queued as an offset in 100 offline sessions.
func BenchmarkLoggedRoute(b *testing.B) {
	s := loggedFanout(b, 100)
	m := newSimpleMessage("bench/x", make([]byte, 64), 1, false, time.Now())
	var mt topic.Matches
	b.ReportAllocs()
	b.SetBytes(int64(len(m.payload)))
	for b.Loop() {
		m.off = 0
		s.publish(m, &mt)
		drainStored(s)
	}
}

// BenchmarkDurablePublish measures QoS 1 publishing over TCP to a shard
// with a message log, per fsync policy: batches of 256 pipelined PUBLISH
// packets, then their PUBACKs (under always, each after its fsync, group
// committed).
func BenchmarkDurablePublish(b *testing.B) {
	for _, policy := range []wal.Policy{wal.SyncAlways, wal.SyncInterval, wal.SyncNever} {
		b.Run(policy.String(), func(b *testing.B) {
			st := openWALStore(b, b.TempDir(), policy)
			br := startBrokerWith(b, newDurableShard(st))
			pub := v5Client(b, br, "bench-pub")
			const batch = 256
			var buf []byte
			for i := range batch {
				buf, _ = (&packet.Publish{QoS: 1, PacketID: uint16(i + 1), Topic: []byte("dur/x"), Payload: make([]byte, 128)}).Append(buf, packet.Version5)
			}
			b.ReportAllocs()
			b.SetBytes(batch * 128)
			for b.Loop() {
				pub.sendBytes(buf)
				for range batch {
					pub.ack(packet.TypePuback)
				}
			}
			b.ReportMetric(float64(b.N)*batch/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// TestLogHoldsOnlyQoS12: QoS 0 messages never touch the message log (their
// ingest speed is the in-memory path's); QoS 1 and 2 messages are each
// appended once.
func TestLogHoldsOnlyQoS12(t *testing.T) {
	t.Parallel()
	st := openWALStore(t, t.TempDir(), wal.SyncAlways)
	b := startBrokerWith(t, newDurableShard(st))
	sub := v5Client(t, b, "s")
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("q/#"), QoS: 2})
	pub := v5Client(t, b, "p")
	for range 50 {
		pub.send(&packet.Publish{Topic: []byte("q/0"), Payload: []byte("zero")})
	}
	pub.send(&packet.Publish{QoS: 1, PacketID: 1, Topic: []byte("q/1"), Payload: []byte("one")})
	pub.ack(packet.TypePuback)
	pub.send(&packet.Publish{QoS: 2, PacketID: 2, Topic: []byte("q/2"), Payload: []byte("two")})
	pub.ack(packet.TypePubrec)
	for range 52 {
		if p := sub.publish(); p.QoS == 2 {
			sub.send(&packet.Ack{Type: packet.TypePubrec, PacketID: p.PacketID})
		} else if p.QoS == 1 {
			sub.send(&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID})
		}
	}
	if got := st.Messages().NextOffset(); got != 2 {
		t.Fatalf("%d records in the message log, want 2 (QoS 1 and 2 only)", got)
	}
}

// TestConsumedSegmentsRemoved: message-log segments stay while a session
// still needs them, go once every session has acknowledged them, and are
// kept anyway for ReplayHistory.
func TestConsumedSegmentsRemoved(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		history time.Duration
		removed bool
	}{
		{"no history", 0, true},
		{"history", time.Hour, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st, err := store.OpenWAL(store.WALOptions{Dir: t.TempDir(), Fsync: wal.SyncNever, SegmentBytes: 4096})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			sh := New(Options{Store: st, MessageLog: st.Messages(), SysInterval: -1, CheckpointInterval: time.Hour, ReplayHistory: tc.history})
			b := startBrokerWith(t, sh)
			if err := fillOffline(sh, "slow", "seg/#", 100, 200); err != nil {
				t.Fatal(err)
			}
			log := st.Messages()
			segs := len(log.Segments())
			if segs < 3 {
				t.Fatalf("only %d segments", segs)
			}
			first := log.Segments()[0]
			sh.checkpoint(true)
			if got := len(log.Segments()); got != segs {
				t.Fatalf("%d segments after a checkpoint, want all %d (still pending)", got, segs)
			}
			c := dialRaw(t, b.addr, packet.Version5)
			c.connect(sessionConnect("slow", neverExpires, false))
			for range 100 {
				p := c.publish()
				c.send(&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID})
			}
			eventually(t, "acks processed", func() bool {
				ss, _ := sh.SessionStats("slow")
				return ss.Inflight == 0
			})
			sh.checkpoint(true)
			// The acknowledgements are logged too (ack records, ackrecord.go):
			// they may have rolled a new segment, so count from the first.
			after := log.Segments()
			if tc.removed && len(after) != 1 {
				t.Fatalf("segments %v after everything was acknowledged, want 1 (the active one)", after)
			}
			if !tc.removed && (after[0] != first || len(after) < segs) {
				t.Fatalf("segments %v, want all %d from base %d kept as replay history", after, segs, first)
			}
		})
	}
}
