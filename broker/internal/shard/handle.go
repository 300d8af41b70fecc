package shard

import (
	"errors"

	"berth.dev/broker/packet"
)

// Sentinels returned by handle to end the read loop normally.
var (
	errDisconnect         = errors.New("shard: client disconnected")
	errDisconnectWithWill = errors.New("shard: client disconnected with will")
)

// handle dispatches one packet read after CONNECT.
func (c *conn) handle(fh packet.FixedHeader, body []byte) error {
	v, in := c.version, c.scratch()
	switch fh.Type {
	case packet.TypePublish:
		if err := in.pub.Decode(v, fh, body); err != nil {
			return err
		}
		return c.handlePublish(&in.pub)
	case packet.TypePuback, packet.TypePubrec, packet.TypePubrel, packet.TypePubcomp:
		if err := in.ack.Decode(v, fh, body); err != nil {
			return err
		}
		return c.handleAck(&in.ack)
	case packet.TypeSubscribe:
		if err := in.sub.Decode(v, fh, body); err != nil {
			return err
		}
		return c.handleSubscribe(&in.sub)
	case packet.TypeUnsubscribe:
		if err := in.unsub.Decode(v, fh, body); err != nil {
			return err
		}
		return c.handleUnsubscribe(&in.unsub)
	case packet.TypePingreq:
		var p packet.Ping
		if err := p.Decode(v, fh, body); err != nil {
			return err
		}
		c.send(&pingresp) // [MQTT-3.12.4-1]
		return nil
	case packet.TypeDisconnect:
		if err := in.disc.Decode(v, fh, body); err != nil {
			return err
		}
		return c.handleDisconnect(&in.disc)
	case packet.TypeAuth:
		if err := in.auth.Decode(v, fh, body); err != nil {
			return err
		}
		return c.handleAuth(&in.auth)
	case packet.TypeConnect:
		return packet.ErrProtocol // [MQTT-3.1.0-2] a second CONNECT
	default:
		// CONNACK, SUBACK, UNSUBACK, PINGRESP are server-to-client only.
		if err := fh.Check(); err != nil {
			return err
		}
		return packet.ErrProtocol
	}
}

var pingresp = packet.Ping{Type: packet.TypePingresp}

// handleDisconnect ends the connection at the client's request.
func (c *conn) handleDisconnect(p *packet.Disconnect) error {
	if c.version == packet.Version5 && p.Props.Has.Has(packet.PropSessionExpiry) {
		if c.expiry0 && p.Props.SessionExpiry != 0 {
			return packet.ErrProtocol // [MQTT-3.14.2-2]
		}
		exp, _ := c.shard.capExpiry(p.Props.SessionExpiry) // the tenant's cap holds here too
		c.sess.mu.Lock()
		c.sess.expiry = exp
		c.sess.mu.Unlock()
	}
	if p.Reason == packet.CodeDisconnectWithWill {
		return errDisconnectWithWill
	}
	return errDisconnect // [MQTT-3.14.4-3] the will is discarded
}
