package shard

import (
	"berth.dev/broker/internal/store"
	"berth.dev/broker/packet"
)

// sendAck queues a PUBACK, PUBREC, PUBREL or PUBCOMP; reader only (it
// uses the outbox).
func (c *conn) sendAck(t packet.Type, id uint16, code packet.ReasonCode) {
	c.sess.mu.Lock()
	if c.queueBehindLocked(t, id, code) {
		c.sess.mu.Unlock()
		return // [MQTT-4.6.0-2] after the acks waiting for their fsync
	}
	c.sendAckLocked(t, id, code)
	c.sess.mu.Unlock()
	c.outbox().add(c) // sent with the acks of the packets read together
}

// handleAck processes PUBACK, PUBREC, PUBCOMP (our outbound flows) and
// PUBREL (the client's inbound QoS 2 flow).
func (c *conn) handleAck(a *packet.Ack) error {
	sess := c.sess
	sess.mu.Lock()
	defer sess.mu.Unlock()
	var parked bool
	var err error // a QoS 2 state record not logged under -fsync always
	switch a.Type {
	case packet.TypePuback:
		if d, ok := sess.inflight[a.PacketID]; ok && d.qos == 1 {
			delete(sess.inflight, a.PacketID) // the id is free again (MQTT 5.0 section 2.2.1)
			sess.endTraceLocked(a.PacketID, true, "")
			c.noteAckedLocked(&d)
			d.msg.unref() // the inflight entry's; a batch still writing it holds its own
		}
	case packet.TypePubrec:
		d, ok := sess.inflight[a.PacketID]
		if !ok || d.qos != 2 {
			if c.version == packet.Version5 {
				c.sendAckLocked(packet.TypePubrel, a.PacketID, packet.ErrPacketIDNotFound)
			}
			break
		}
		if a.Reason.IsFailure() {
			delete(sess.inflight, a.PacketID) // MQTT 5.0 section 4.3.3: the flow ends
			sess.endTraceLocked(a.PacketID, false, "PUBREC "+a.Reason.String())
			if c.sentLogged(&d) {
				c.appendQoS2Locked(store.StateOutCompleted, a.PacketID)
			}
			d.msg.unref()
			break
		}
		logged := c.sentLogged(&d)
		d.state = stateReleased
		d.msg.unref()
		d.msg = nil // the payload is not needed any more
		sess.inflight[a.PacketID] = d
		if logged {
			if parked, err = c.logQoS2Locked(store.StateOutReleased, a.PacketID, packet.TypePubrel, packet.CodeSuccess); parked || err != nil {
				break // sent once "released" is durable (qos2.go)
			}
		}
		c.sendAckLocked(packet.TypePubrel, a.PacketID, packet.CodeSuccess) // [MQTT-4.3.3-4]
	case packet.TypePubcomp:
		if d, ok := sess.inflight[a.PacketID]; ok && d.state == stateReleased {
			delete(sess.inflight, a.PacketID)
			sess.endTraceLocked(a.PacketID, true, "")
			c.completeOutLocked(a.PacketID)
		}
	case packet.TypePubrel:
		code := packet.CodeSuccess
		if at, ok := sess.awaitingRelLocked()[a.PacketID]; ok {
			delete(sess.aside.awaitingRel, a.PacketID) // [MQTT-4.3.3-11]
			if at != 0 {
				if parked, err = c.logQoS2Locked(store.StateInReleased, a.PacketID, packet.TypePubcomp, code); parked || err != nil {
					break // sent once "released" is durable (qos2.go)
				}
			}
		} else if c.version == packet.Version5 {
			code = packet.ErrPacketIDNotFound
		}
		c.sendAckLocked(packet.TypePubcomp, a.PacketID, code)
	}
	c.outbox().add(c) // an answer, or room in the inflight window
	return err
}
