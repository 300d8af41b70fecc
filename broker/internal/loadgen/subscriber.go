package loadgen

import (
	"sync/atomic"
	"time"

	"berth.dev/broker/packet"
)

// subscriber receives stamped messages on one connection, acknowledges
// them at their QoS, and accounts for them per publisher.
type subscriber struct {
	c    *client
	pubs []bool // pubs[i]: publisher i publishes to a topic this subscriber has

	// Owned by the reader goroutine until readDone closes.
	sets       []seqSet // by publisher id
	unexpected uint64   // not ours: no stamp, unknown publisher, wrong topic

	received, unique, bytes atomic.Uint64
	dups                    atomic.Uint64
	lastRecv                atomic.Int64 // Unix nanoseconds
	lat                     *recorder

	readErr  error
	readDone chan struct{}
}

func newSubscriber(c *client, pubs []bool) *subscriber {
	return &subscriber{c: c, pubs: pubs, sets: make([]seqSet, len(pubs)), lat: newRecorder(), readDone: make(chan struct{})}
}

// readLoop handles deliveries until the connection ends.
func (s *subscriber) readLoop() {
	defer close(s.readDone)
	var pk packet.Publish
	var rel packet.Ack
	ack := []byte{0, 2, 0, 0}
	pending := false
	for {
		fh, body, err := s.c.r.ReadPacket(0)
		if err != nil {
			s.readErr = err
			return
		}
		switch fh.Type {
		case packet.TypePublish:
			now := time.Now().UnixNano()
			if err := pk.Decode(s.c.version, fh, body); err != nil {
				s.readErr = err
				return
			}
			s.account(&pk, now)
			switch pk.QoS {
			case 1: // PUBACK (section 4.3.2) with the PUBLISH's identifier [MQTT-2.3.1-6]
				ack[0] = byte(packet.TypePuback) << 4
			case 2: // PUBREC, then PUBCOMP on PUBREL (section 4.3.3)
				ack[0] = byte(packet.TypePubrec) << 4
			default:
				continue
			}
			ack[2], ack[3] = byte(pk.PacketID>>8), byte(pk.PacketID)
			if err := s.c.writeRaw(ack); err != nil {
				s.readErr = err
				return
			}
			pending = true
		case packet.TypePubrel:
			if err := rel.Decode(s.c.version, fh, body); err != nil {
				s.readErr = err
				return
			}
			ack[0] = byte(packet.TypePubcomp) << 4 // section 4.3.3
			ack[2], ack[3] = byte(rel.PacketID>>8), byte(rel.PacketID)
			if err := s.c.writeRaw(ack); err != nil {
				s.readErr = err
				return
			}
			pending = true
		case packet.TypeDisconnect:
			s.readErr = errDisconnected
			return
		}
		// Acknowledge in batches: flush once everything read so far is handled.
		if pending && s.c.r.Buffered() == 0 {
			if err := s.c.flush(); err != nil {
				s.readErr = err
				return
			}
			pending = false
		}
	}
}

// account records one delivery: uniqueness per publisher and latency.
func (s *subscriber) account(pk *packet.Publish, now int64) {
	s.received.Add(1)
	s.bytes.Add(uint64(len(pk.Payload)))
	s.lastRecv.Store(now)
	pub, seq, sent, ok := readStamp(pk.Payload)
	if !ok || int(pub) >= len(s.sets) || !s.pubs[pub] {
		s.unexpected++
		return
	}
	if !s.sets[pub].add(seq) {
		s.dups.Add(1)
		return
	}
	s.unique.Add(1)
	s.lat.record(now - sent)
}
