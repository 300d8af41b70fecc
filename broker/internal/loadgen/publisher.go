package loadgen

import (
	"net"
	"sync/atomic"
	"time"

	"berth.dev/broker/packet"
)

// sendBuffer is the publishers' SO_SNDBUF.
const sendBuffer = 128 << 10

// publisher sends stamped messages on one connection. QoS 1 and 2 are
// pipelined: up to cap(window) messages wait for their acknowledgement, each
// under its own packet identifier [MQTT-2.2.1-3].
type publisher struct {
	id    uint32
	c     *client
	qos   byte
	tmpl  []byte // the whole encoded PUBLISH, patched per message
	payAt int    // offset of the payload in tmpl

	window chan struct{}  // one token per message in flight (QoS > 0)
	sentAt []atomic.Int64 // send time by packet id, 0 when free (QoS > 0)
	nextID uint16

	sent, acked, rejected, strayAcks atomic.Uint64
	lastAck                          atomic.Int64 // Unix nanoseconds
	ackLat                           *recorder

	readErr  error         // why the reader stopped; read after readDone
	readDone chan struct{} // closed when the reader returns
}

func newPublisher(id uint32, c *client, topic string, qos byte, payload, inflight int) (*publisher, error) {
	p := &publisher{id: id, c: c, qos: qos, ackLat: newRecorder(), readDone: make(chan struct{})}
	if tc, ok := c.conn.(*net.TCPConn); ok {
		// A fixed send buffer instead of the kernel's autotuned megabytes:
		// messages a saturated broker has not read wait here, not in a
		// queue that hides the broker's real rate.
		tc.SetWriteBuffer(max(sendBuffer, 4*len(topic)+4*payload))
	}
	pk := packet.Publish{QoS: qos, Topic: []byte(topic), Payload: make([]byte, payload)}
	if qos > 0 {
		pk.PacketID = 1
		w := min(inflight, int(c.recvMax))
		p.window = make(chan struct{}, w)
		// Identifiers cycle through 1..2w: at most w are in use, so a free
		// one is always near, and the table stays small.
		p.sentAt = make([]atomic.Int64, min(2*w, 65535)+1)
	}
	var err error
	if p.tmpl, err = pk.Append(nil, c.version); err != nil {
		return nil, err
	}
	p.payAt = len(p.tmpl) - payload
	return p, nil
}

// run publishes until done closes, count messages are sent (0: no limit)
// or the connection fails. rate > 0 paces the messages evenly from start.
func (p *publisher) run(done <-chan struct{}, start time.Time, rate, count int) error {
	var interval time.Duration
	if rate > 0 {
		interval = time.Second / time.Duration(rate)
	}
	next := start
	var timer *time.Timer
	for seq := uint32(0); count == 0 || int(seq) < count; seq++ {
		select {
		case <-done:
			return p.c.flush()
		case <-p.readDone:
			return p.readErr
		default:
		}
		if interval > 0 {
			if d := time.Until(next); d > 0 {
				// Ahead of schedule: put what is buffered on the wire, then wait.
				if err := p.c.flush(); err != nil {
					return err
				}
				if timer == nil {
					timer = time.NewTimer(d)
				} else {
					timer.Reset(d)
				}
				select {
				case <-done:
					return nil
				case <-p.readDone:
					return p.readErr
				case <-timer.C:
				}
			}
			next = next.Add(interval)
		}
		now := time.Now().UnixNano()
		if p.qos > 0 {
			if ok, err := p.acquire(done); !ok {
				return err
			}
			id := p.allocID()
			packet.SetPacketID(p.tmpl, id)
			p.sentAt[id].Store(now)
		}
		putStamp(p.tmpl[p.payAt:], p.id, seq, now)
		if err := p.c.writeRaw(p.tmpl); err != nil {
			return err
		}
		p.sent.Add(1)
	}
	return p.c.flush()
}

// acquire takes a window slot, flushing first when it would block. It
// returns false when the run ended (err nil) or the connection failed.
func (p *publisher) acquire(done <-chan struct{}) (bool, error) {
	select {
	case p.window <- struct{}{}:
		return true, nil
	default:
	}
	if err := p.c.flush(); err != nil {
		return false, err
	}
	select {
	case p.window <- struct{}{}:
		return true, nil
	case <-done:
		return false, nil
	case <-p.readDone:
		return false, p.readErr
	}
}

// allocID returns a free packet identifier; a window slot is held, so at
// most cap(window)-1 others are in use and the search ends quickly.
func (p *publisher) allocID() uint16 {
	for {
		p.nextID++
		if int(p.nextID) >= len(p.sentAt) || p.nextID == 0 {
			p.nextID = 1 // a non-zero, unused identifier (MQTT 5.0 [MQTT-2.2.1-3])
		}
		if p.sentAt[p.nextID].Load() == 0 {
			return p.nextID
		}
	}
}

// outstanding is the number of QoS 1/2 messages not yet acknowledged.
func (p *publisher) outstanding() uint64 {
	if p.qos == 0 {
		return 0
	}
	return p.sent.Load() - p.acked.Load() - p.rejected.Load()
}

// readLoop handles acknowledgements until the connection ends.
func (p *publisher) readLoop() {
	defer close(p.readDone)
	var ack packet.Ack
	pubrel := []byte{byte(packet.TypePubrel)<<4 | 0x02, 2, 0, 0}
	pending := false
	for {
		fh, body, err := p.c.r.ReadPacket(0)
		if err != nil {
			p.readErr = err
			return
		}
		switch fh.Type {
		case packet.TypePuback, packet.TypePubrec, packet.TypePubcomp:
			if err := ack.Decode(p.c.version, fh, body); err != nil {
				p.readErr = err
				return
			}
			if fh.Type == packet.TypePubrec && !ack.Reason.IsFailure() {
				// Answer PUBREC with PUBREL (section 4.3.3); the message
				// counts as accepted at PUBCOMP.
				pubrel[2], pubrel[3] = byte(ack.PacketID>>8), byte(ack.PacketID)
				if err := p.c.writeRaw(pubrel); err != nil {
					p.readErr = err
					return
				}
				pending = true
			} else {
				p.complete(ack.PacketID, ack.Reason)
			}
		case packet.TypeDisconnect:
			p.readErr = errDisconnected
			return
		}
		// Send PUBRELs in batches: flush once everything read is handled.
		if pending && p.c.r.Buffered() == 0 {
			if err := p.c.flush(); err != nil {
				p.readErr = err
				return
			}
			pending = false
		}
	}
}

// complete settles the message under id at its PUBACK or PUBCOMP (or a
// failing PUBREC) and frees its window slot.
func (p *publisher) complete(id uint16, reason packet.ReasonCode) {
	if int(id) >= len(p.sentAt) {
		p.strayAcks.Add(1)
		return
	}
	sent := p.sentAt[id].Swap(0)
	if sent == 0 {
		p.strayAcks.Add(1)
		return
	}
	now := time.Now().UnixNano()
	if reason.IsFailure() {
		p.rejected.Add(1)
	} else {
		p.acked.Add(1)
		p.ackLat.record(now - sent)
		p.lastAck.Store(now)
	}
	<-p.window
}
