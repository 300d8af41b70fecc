package shard

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"berth.dev/broker/internal/wal"
	"berth.dev/broker/packet"
)

// A retained PUBLISH is stored before it is routed (setRetained runs
// ahead of the routing, so a new subscriber never misses it), once it is
// logged (retainLogged): what the retained store keeps must be a message
// of its own, not in the log, and
// the copy queues and inflight windows take (message.own) must carry the
// record's offset, or it skips the durability gate and the session cursor.

// TestRetainedNotWrittenOnceShown: a retained QoS 1 message holding its
// own memory (a will, a payload too big for the pooled sizes) goes into
// the retained store, where a new subscription reads it at once
// (queueRetained, then enqueue, the writer's gate and cursorLocked read
// its offset), while the publisher goes on to log it. Before the fix the
// store held the message itself and the append wrote its offset after it
// was shown: a data race (this test fails under -race), and a retained
// copy with an offset. The retained copy is never in the log: offset 0.
func TestRetainedNotWrittenOnceShown(t *testing.T) {
	t.Parallel()
	log, err := wal.Open(wal.Options{Dir: t.TempDir(), Fsync: wal.SyncNever})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	s := New(Options{MessageLog: log, SysInterval: -1})
	for i := range 4 {
		name := fmt.Sprintf("r/%d", i)
		m := newSimpleMessage(name, bytes.Repeat([]byte{'p'}, 1<<10), 1, true, time.Now())
		shown := make(chan uint64, 1)
		go func() {
			// A subscription arriving as the retained message is stored.
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) {
				if r, ok := s.retained.Get(name); ok {
					shown <- r.off
					return
				}
				runtime.Gosched()
			}
			close(shown)
		}()
		s.publishInternal(m)
		off, ok := <-shown
		if !ok {
			t.Fatalf("%s: retained message never shown", name)
		}
		if off != 0 {
			t.Errorf("%s: the retained copy carries log offset %d; a retained message is not in the log", name, off-1)
		}
		if m.off == 0 {
			t.Fatalf("%s: QoS 1 message not logged", name)
		}
	}
}

// TestOwnedCopyOfRetainedGated: -fsync always. A subscriber (Receive
// Maximum 1, holding its first message unacknowledged) has a queue of
// messages each from a different slab chunk, so a further delivery gets
// an owned copy (ring.sparse). The log's fsync then fails under a
// retained QoS 1 PUBLISH: its publisher is disconnected unacknowledged,
// and the subscriber, acknowledging what it gets, must get every message
// before it and never that one. Before the fix its owned copy had been
// made (and cached) by setRetained before the append gave the message
// its offset: the copy queued had offset 0 and went out ungated.
func TestOwnedCopyOfRetainedGated(t *testing.T) {
	t.Parallel()
	b, dfs := faultyShard(t, wal.SyncAlways)
	sub := dialRaw(t, b.addr, packet.Version5)
	cp := &packet.Connect{ClientID: []byte("narrow"), CleanStart: true}
	cp.Props.Has.Set(packet.PropReceiveMaximum)
	cp.Props.ReceiveMaximum = 1
	if ack := sub.connect(cp); ack.Reason != packet.CodeSuccess {
		t.Fatalf("CONNACK %v", ack.Reason)
	}
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("g/#"), QoS: 1})
	pub := v5Client(t, b, "pub")

	// One write per round: the QoS 1 message for the subscriber and QoS 0
	// ones for no one, read together into one chunk; the PUBACK (after
	// the fsync) ends the round, and the reader lets the chunk go.
	round := func(id uint16, payload string, retain bool) {
		var w []byte
		w = append(w, encode(t, &packet.Publish{QoS: 1, PacketID: id, Retain: retain, Topic: []byte("g/t"), Payload: []byte(payload)}, packet.Version5)...)
		for range slabMessages - 1 {
			w = append(w, encode(t, &packet.Publish{Topic: []byte("elsewhere"), Payload: []byte("x")}, packet.Version5)...)
		}
		pub.sendBytes(w)
	}
	const rounds = pinnedRunsMax + 8
	for i := range rounds {
		round(uint16(i+1), fmt.Sprintf("ok-%d", i), false)
		if a := pub.ack(packet.TypePuback); a.Reason.IsFailure() {
			t.Fatalf("PUBACK %d: %v", i, a.Reason)
		}
	}

	dfs.syncErr.Store(true)
	round(1000, "lost-retained", true)
	if r := readUntilClosed(t, pub, "-"); r != packet.ErrUnspecified {
		t.Fatalf("publisher: DISCONNECT %v, want 0x80", r)
	}

	got := map[string]int{}
	deadline := time.Now().Add(20 * time.Second)
	for closed := false; !closed; {
		if time.Now().After(deadline) {
			t.Fatalf("the subscriber was not disconnected within 20 s (got %d messages)", len(got))
		}
		fh, body, err := sub.next()
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			continue
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isReset(err):
			closed = true
			continue
		case err != nil:
			t.Fatal(err)
		}
		if fh.Type != packet.TypePublish {
			continue // the DISCONNECT 0x80: its messages cannot become durable
		}
		var p packet.Publish
		if err := p.Decode(sub.version, fh, body); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(string(p.Payload), "lost") {
			t.Fatalf("subscriber got %q (QoS %d) though its record never became durable", p.Payload, p.QoS)
		}
		got[string(p.Payload)]++
		sub.send(&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID})
	}
	for i := range rounds {
		if n := got[fmt.Sprintf("ok-%d", i)]; n != 1 {
			t.Errorf("ok-%d delivered %d times, want once", i, n)
		}
	}
}
