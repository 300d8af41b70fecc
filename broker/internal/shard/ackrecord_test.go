package shard

import (
	"encoding/binary"
	"testing"
	"time"

	"berth.dev/broker/internal/store"
	"berth.dev/broker/internal/wal"
	"berth.dev/broker/packet"
)

// TestAcknowledgedNotRedeliveredAfterCrash: a connected persistent
// subscriber PUBACKs 60 of 100 QoS 1 messages (in reverse order, in one
// write) and the broker crashes before any checkpoint saved its cursor.
// After the restart it gets exactly the 40 it had not acknowledged, in
// order, and none of the 60 again; the 60 acknowledgements cost a few
// log records, not one each.
func TestAcknowledgedNotRedeliveredAfterCrash(t *testing.T) {
	t.Parallel()
	for _, policy := range []wal.Policy{wal.SyncInterval, wal.SyncAlways} {
		t.Run(policy.String(), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			open := func() (*Shard, *store.WAL) {
				st := openWALStore(t, dir, policy)
				return New(Options{Store: st, MessageLog: st.Messages(), SysInterval: -1, CheckpointInterval: time.Hour}), st
			}
			sh, st := open()
			b := startBrokerWith(t, sh)
			sub := dialRaw(t, b.addr, packet.Version5)
			sub.connect(sessionConnect("acker", 3600, true))
			sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("ack/#"), QoS: 1})
			pub := v5Client(t, b, "ack-pub")
			const n, acked = 100, 60
			var buf []byte
			for i := range n {
				buf, _ = (&packet.Publish{QoS: 1, PacketID: uint16(i + 1), Topic: []byte("ack/t"), Payload: seqPayload(i)}).Append(buf, packet.Version5)
			}
			pub.sendBytes(buf)
			for range n {
				pub.ack(packet.TypePuback)
			}
			ids := make([]uint16, n)
			for i := range n {
				p := sub.publish()
				if got := int(binary.BigEndian.Uint32(p.Payload)); got != i {
					t.Fatalf("delivery %d carries %d", i, got)
				}
				ids[i] = p.PacketID
			}
			before := st.Messages().NextOffset()
			var acks []byte
			for i := acked - 1; i >= 0; i-- {
				acks, _ = (&packet.Ack{Type: packet.TypePuback, PacketID: ids[i]}).Append(acks, packet.Version5)
			}
			sub.sendBytes(acks)
			sub.ping()
			if records := st.Messages().NextOffset() - before; records == 0 || records > 4 {
				t.Fatalf("%d acknowledgements took %d log records, want 1 to 4", acked, records)
			}

			if err := st.Close(); err != nil { // the crash: no shutdown, no checkpoint
				t.Fatal(err)
			}
			sh2, _ := open()
			b2 := startBrokerWith(t, sh2)
			sub2 := dialRaw(t, b2.addr, packet.Version5)
			if ack := sub2.connect(sessionConnect("acker", 3600, false)); !ack.SessionPresent {
				t.Fatal("session not present after the crash")
			}
			for i := acked; i < n; i++ {
				p := sub2.publish()
				if got := int(binary.BigEndian.Uint32(p.Payload)); got != i {
					t.Fatalf("after the crash got message %d, want %d (the first not acknowledged)", got, i)
				}
				sub2.send(&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID})
			}
			sub2.expectSilence(200 * time.Millisecond)
		})
	}
}

// BenchmarkDurableDelivery measures QoS 1 end to end over TCP on a shard
// with a message log (fsync interval, the standalone default): batches of
// 256 pipelined PUBLISH packets to a connected persistent subscriber that
// PUBACKs each delivery as it reads it (so the subscriber's acknowledgement
// records are part of the cost), and the publisher's PUBACKs.
func BenchmarkDurableDelivery(b *testing.B) {
	st := openWALStore(b, b.TempDir(), wal.SyncInterval)
	br := startBrokerWith(b, New(Options{Store: st, MessageLog: st.Messages(), SysInterval: -1, MaxInflight: 1024}))
	sub := dialRaw(b, br.addr, packet.Version5)
	sub.connect(sessionConnect("bench-sub", 3600, true))
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("dd/#"), QoS: 1})
	pub := v5Client(b, br, "bench-pub")
	const batch = 256
	var buf []byte
	for i := range batch {
		buf, _ = (&packet.Publish{QoS: 1, PacketID: uint16(i + 1), Topic: []byte("dd/x"), Payload: make([]byte, 128)}).Append(buf, packet.Version5)
	}
	got := make(chan int, 1)
	var subErr error // written before close(got)
	go func() {
		var ack []byte
		n := 0
		for {
			_ = sub.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
			fh, body, err := sub.rd.ReadPacket(0)
			if err != nil {
				subErr = err
				close(got)
				return
			}
			if fh.Type != packet.TypePublish {
				continue
			}
			var p packet.Publish
			if err := p.Decode(packet.Version5, fh, body); err != nil {
				subErr = err
				close(got)
				return
			}
			ack, _ = (&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID}).Append(ack[:0], packet.Version5)
			// Renew the write deadline like the read one: connect and
			// subscribe (sendBytes) left a 5 s deadline on this socket,
			// which used to fail every run longer than 5 s.
			_ = sub.nc.SetWriteDeadline(time.Now().Add(30 * time.Second))
			if _, err := sub.nc.Write(ack); err != nil {
				subErr = err
				close(got)
				return
			}
			if n++; n == batch {
				got <- n
				n = 0
			}
		}
	}()
	b.ReportAllocs()
	b.SetBytes(batch * 128)
	start := st.Messages().NextOffset()
	batches := 0
	for b.Loop() {
		pub.sendBytes(buf)
		readPubacks(b, pub, batch)
		if _, ok := <-got; !ok {
			b.Fatalf("subscriber stopped after %d messages: %v", batches*batch, subErr)
		}
		batches++
	}
	msgs := float64(b.N) * batch
	b.ReportMetric(msgs/b.Elapsed().Seconds(), "msgs/s")
	// Records beyond the messages: the subscriber's acknowledgement records.
	b.ReportMetric((float64(st.Messages().NextOffset()-start)-msgs)/msgs, "ackrecords/msg")
}

// readPubacks reads n successful PUBACKs without the copy rawClient.ack
// makes, so that allocs/op counts the broker's allocations, not the
// harness's (two per message before).
func readPubacks(b *testing.B, c *rawClient, n int) {
	b.Helper()
	_ = c.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	for range n {
		fh, body, err := c.rd.ReadPacket(0)
		if err != nil {
			b.Fatalf("reading PUBACK: %v", err)
		}
		var a packet.Ack
		if err := a.Decode(c.version, fh, body); err != nil || a.Type != packet.TypePuback || a.Reason >= 0x80 {
			b.Fatalf("got %v %v (%v), want a successful PUBACK", fh.Type, a.Reason, err)
		}
	}
}
