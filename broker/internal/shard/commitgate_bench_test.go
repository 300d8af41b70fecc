package shard

import (
	"encoding/binary"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"berth.dev/broker/internal/wal"
	"berth.dev/broker/packet"
)

// BenchmarkDeliveryLatency measures QoS 1 publish → delivery and PUBACK
// latency at a fixed 1,000 msg/s (one PUBLISH per iteration, a
// millisecond apart: run with -benchtime Nx) to one connected QoS 1
// subscriber, on a shard whose log is replicated on three in-process nodes
// (R3) and on one with -fsync always. Both wait for the record's
// durability before the PUBACK and, since subscribers see only durable
// messages, before the delivery.
func BenchmarkDeliveryLatency(b *testing.B) {
	for _, name := range []string{"R3", "always"} {
		b.Run(name, func(b *testing.B) {
			var sh *Shard
			if name == "R3" {
				st, l, _ := replicatedStore(b)
				sh = New(Options{Store: st, MessageLog: st.Messages(), Replication: l, SysInterval: -1, CheckpointInterval: 20 * time.Millisecond})
			} else {
				sh = newDurableShard(openWALStore(b, b.TempDir(), wal.SyncAlways))
			}
			benchDeliveryLatency(b, startBrokerWith(b, sh))
		})
	}
}

func benchDeliveryLatency(b *testing.B, br *testBroker) {
	sub := dialRaw(b, br.addr, packet.Version5)
	sub.connectOK("lat-sub")
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("lat/#"), QoS: 1})
	pub := v5Client(b, br, "lat-pub")
	base := time.Now()
	var sent [1 << 16]int64 // by packet id: ns since base
	var e2e, ack []int64
	delivered, acked := make(chan struct{}), make(chan struct{})
	n := 0
	var got atomic.Int64 // deliveries and PUBACKs read
	readLat := func(c *rawClient, want packet.Type, out *[]int64, done chan struct{}) {
		defer close(done)
		var buf []byte
		for {
			_ = c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
			fh, body, err := c.rd.ReadPacket(0)
			if err != nil {
				return
			}
			now := int64(time.Since(base))
			switch {
			case fh.Type == packet.TypePublish && want == packet.TypePublish:
				var p packet.Publish
				if p.Decode(packet.Version5, fh, body) != nil || len(p.Payload) < 8 {
					return
				}
				*out = append(*out, now-int64(binary.BigEndian.Uint64(p.Payload)))
				got.Add(1)
				buf, _ = (&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID}).Append(buf[:0], packet.Version5)
				if _, err := c.nc.Write(buf); err != nil {
					return
				}
			case fh.Type == packet.TypePuback && want == packet.TypePuback:
				var a packet.Ack
				if a.Decode(packet.Version5, fh, body) != nil {
					return
				}
				*out = append(*out, now-atomic.LoadInt64(&sent[a.PacketID]))
				got.Add(1)
			}
		}
	}
	go readLat(sub, packet.TypePublish, &e2e, delivered)
	go readLat(pub, packet.TypePuback, &ack, acked)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	payload := make([]byte, 64)
	var frame []byte
	for b.Loop() {
		<-tick.C
		n++
		id := uint16(n%65535 + 1)
		at := int64(time.Since(base))
		atomic.StoreInt64(&sent[id], at)
		binary.BigEndian.PutUint64(payload, uint64(at))
		frame, _ = (&packet.Publish{QoS: 1, PacketID: id, Topic: []byte("lat/x"), Payload: payload}).Append(frame[:0], packet.Version5)
		pub.sendBytes(frame)
	}
	deadline := time.Now().Add(10 * time.Second)
	for got.Load() < int64(2*n) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // the readers own the slices until they end
	}
	_ = sub.nc.Close()
	_ = pub.nc.Close()
	<-delivered
	<-acked
	pct := func(v []int64, p float64) float64 {
		if len(v) == 0 {
			return 0
		}
		slices.Sort(v)
		return float64(v[int(float64(len(v)-1)*p)]) / 1e3
	}
	b.ReportMetric(pct(e2e, 0.5), "e2e-p50-µs")
	b.ReportMetric(pct(e2e, 0.99), "e2e-p99-µs")
	b.ReportMetric(pct(ack, 0.5), "puback-p50-µs")
	b.ReportMetric(pct(ack, 0.99), "puback-p99-µs")
	b.Logf("%d published, %d delivered, %d acknowledged", n, len(e2e), len(ack))
}
