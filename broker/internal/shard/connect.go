package shard

import (
	"bytes"
	"cmp"
	"errors"
	"slices"
	"time"

	"berth.dev/broker/internal/store"
	"berth.dev/broker/packet"
)

// handshake reads and answers CONNECT. On success the connection has a
// session, the CONNACK (and any redelivery) is queued for the writer, and
// ok is true. On failure the refusal has been written and nc closed.
//
// It runs in steps, each its own call, so that the reader's stack holds
// one step's packets at a time: a goroutine's stack never shrinks below
// twice its deepest use, and held connections are many.
func (c *conn) handshake(info *ConnInfo) (present, ok bool) {
	// The CONNECT and CONNACK are pooled: a connection that stays idle
	// after its CONNECT would otherwise leave about 1.2 KiB of garbage
	// behind, which during a mass connect is heap growth (GOGC) that
	// lasts (docs/idle-connections.md).
	x := c.shard.connects.Get().(*connectScratch)
	defer c.shard.putConnectScratch(x)
	cp := &x.cp
	read, ok := c.readConnect(cp, info)
	if !ok {
		return false, false
	}
	var o connectTerms
	if !c.applyConnect(cp, &o) {
		return false, false
	}
	ack := &x.ack
	c.connack(ack, cp, &o)
	_, present, err := c.shard.attach(c, cp.CleanStart, o.expiry, ack)
	if err != nil {
		c.refuse(reasonOf(err))
		return false, false
	}
	c.scratch().connRead = read
	_ = c.nc.SetReadDeadline(time.Time{})
	return present, true
}

// connectScratch is a CONNECT being handled and its CONNACK
// (Shard.connects). Nothing keeps a pointer into it: what outlives the
// handshake (client id, will) is copied out.
type connectScratch struct {
	cp  packet.Connect
	ack packet.Connack
}

// putConnectScratch clears x, dropping its references into the read
// buffer, and pools it.
func (s *Shard) putConnectScratch(x *connectScratch) {
	*x = connectScratch{}
	s.connects.Put(x)
}

// connectTerms is what the server decided of a CONNECT, for the CONNACK.
type connectTerms struct {
	assigned bool   // the server assigned the client id
	serverKA bool   // the server capped the keep alive to ka
	ka       uint16 // keep alive, seconds
	capped   bool   // the server capped the session expiry
	expiry   uint32 // session expiry, seconds
}

// maxConnectSize is the largest CONNECT a shard reads whatever its
// MaxPacketSize: the gateway's default -max-connect-size, room for a
// token with a long ACL and a will.
const maxConnectSize = 64 << 10

// readConnect reads, decodes and authenticates the CONNECT; on failure
// the refusal has been written. info is the ConnInfo handed to Serve.
func (c *conn) readConnect(cp *packet.Connect, info *ConnInfo) (read int64, ok bool) {
	s := c.shard
	_ = c.nc.SetReadDeadline(time.Now().Add(s.opts.ConnectTimeout))
	// The CONNECT is bounded by maxConnectSize, not MaxPacketSize: the
	// Maximum Packet Size announced in CONNACK bounds what the client
	// sends after it [MQTT-3.2.2-15], and a node's MaxPacketSize is
	// the tenant's message size quota, which a CONNECT carrying a
	// credential's token can exceed without any message in it. A will
	// over the quota is refused by checkWill with CONNACK 0x95.
	fh, body, err := c.rd.ReadPacket(max(s.maxPacketSize(), maxConnectSize))
	if err != nil {
		return 0, false // nothing, garbage or silence before CONNECT: just close
	}
	if fh.Type != packet.TypeConnect {
		return 0, false // [MQTT-3.1.0-1] the first packet must be CONNECT
	}
	read = monoNow()
	s.stats.bytesIn.Add(uint64(fh.Size())) // the whole packet: fixed header and body
	c.info.Traffic.addBytesIn(uint64(fh.Size()))
	if err := cp.Decode(0, fh, body); err != nil {
		c.refuseDecode(cp, err)
		return 0, false
	}
	c.version = cp.Version
	if c.version == packet.Version31 {
		c.version = packet.Version311 // 3.1 and 3.1.1 are answered alike
	}
	v5 := c.version == packet.Version5

	// Authentication.
	switch {
	case info.Refuse != 0:
		c.refuse(info.Refuse)
		return 0, false
	case v5 && cp.Props.Has.Has(packet.PropAuthMethod) &&
		(info.AuthMethod == "" || string(cp.Props.AuthMethod) != info.AuthMethod):
		c.refuse(packet.ErrBadAuthMethod) // a method we do not speak (MQTT 5.0 section 4.12)
		return 0, false
	case !cp.UsernameFlag && !info.AllowAnonymous:
		c.refuse(packet.ErrNotAuthorized)
		return 0, false
	case cp.UsernameFlag && info.Authenticate != nil && !info.Authenticate(cp.Username, cp.Password):
		c.refuse(packet.ErrBadUsernameOrPassword)
		return 0, false
	case !info.Deadline.IsZero() && !time.Now().Before(info.Deadline):
		c.refuse(packet.ErrNotAuthorized)
		return 0, false
	}
	return read, true
}

// applyConnect sets the connection up from the CONNECT: client id, keep
// alive, session expiry, the client's limits, the will. On failure the
// refusal has been written.
func (c *conn) applyConnect(cp *packet.Connect, o *connectTerms) bool {
	s := c.shard
	v5 := c.version == packet.Version5

	// Client identifier [MQTT-3.1.3-6] [MQTT-3.1.3-7].
	if len(cp.ClientID) == 0 {
		c.clientID = assignClientID()
		o.assigned = true
	} else {
		c.clientID = string(cp.ClientID)
	}

	// Keep alive [MQTT-3.1.2-22]; the server may cap it in MQTT 5
	// (Server Keep Alive, [MQTT-3.2.2-21]).
	o.ka = cp.KeepAlive
	if v5 && s.opts.MaxKeepAlive > 0 && (o.ka == 0 || o.ka > s.opts.MaxKeepAlive) {
		o.ka = s.opts.MaxKeepAlive
		o.serverKA = true
	}
	c.ka = o.ka

	// Session expiry: 3.1.1 clean session 0 never expires; MQTT 5 takes
	// the property (absent = 0) [MQTT-3.1.2-23].
	if v5 {
		o.expiry = cp.Props.SessionExpiry
	} else if !cp.CleanStart {
		o.expiry = neverExpires
	}
	// The tenant's cap lowers it (0xFFFFFFFF and 3.1.1's "never" too); an
	// MQTT 5 CONNACK then carries the granted interval (MQTT 5.0 section
	// 3.2.2.3.2).
	var capped bool
	o.expiry, capped = s.capExpiry(o.expiry)
	o.capped = capped && v5
	c.expiry0 = o.expiry == 0

	// The client's limits on what we send it.
	// The window itself (below both this and the live MaxInflight) is
	// set by attach [MQTT-3.3.4-9].
	c.recvMax = 65535
	if v5 {
		if cp.Props.Has.Has(packet.PropReceiveMaximum) {
			c.recvMax = cp.Props.ReceiveMaximum
		}
		c.maxOut = cp.Props.MaximumPacketSize      // [MQTT-3.1.2-24] [MQTT-3.1.2-25]
		c.outAliasMax = cp.Props.TopicAliasMaximum // [MQTT-3.3.2-9]
	}

	// Will message [MQTT-3.1.2-7], admitted as a PUBLISH would be (will.go).
	if cp.WillFlag {
		if code := c.checkWill(cp); code != packet.CodeSuccess {
			c.refuse(code)
			return false
		}
		wp := packet.Publish{QoS: cp.WillQoS, Retain: cp.WillRetain, Topic: cp.WillTopic, Payload: cp.WillPayload, Props: cp.WillProps}
		c.will = &willMsg{msg: newMessage(&wp, cp.WillTopic, time.Now(), noPublisher),
			limiter: c.info.Limiter, traffic: c.info.Traffic, clientID: c.clientID,
			delay: cp.WillProps.WillDelay}
	}
	return true
}

// connack builds the CONNACK but for Session Present, which attach sets
// [MQTT-3.2.2-2] [MQTT-3.2.2-3] as it queues the CONNACK and, after it,
// the redelivery of a resumed session's inflight messages.
func (c *conn) connack(ack *packet.Connack, cp *packet.Connect, o *connectTerms) {
	s := c.shard
	v5 := c.version == packet.Version5
	if v5 {
		p := &ack.Props
		p.Has.Set(packet.PropReceiveMaximum)
		p.ReceiveMaximum = s.opts.ReceiveMaximum
		p.Has.Set(packet.PropMaximumPacketSize)
		p.MaximumPacketSize = uint32(s.maxPacketSize())
		p.Has.Set(packet.PropTopicAliasMaximum)
		p.TopicAliasMaximum = uint16(s.opts.TopicAliasMaximum)
		p.Has.Set(packet.PropRetainAvailable)
		p.RetainAvailable = 1
		p.Has.Set(packet.PropWildcardSubAvailable)
		p.WildcardSubAvailable = 1
		p.Has.Set(packet.PropSubIDAvailable)
		p.SubIDAvailable = 1
		p.Has.Set(packet.PropSharedSubAvailable)
		p.SharedSubAvailable = 1
		// Maximum QoS is 2, which is said by leaving the property out
		// (MQTT 5.0 section 3.2.2.3.4).
		if o.assigned {
			p.AssignedClientID = []byte(c.clientID) // [MQTT-3.2.2-16]
		}
		if o.serverKA {
			p.Has.Set(packet.PropServerKeepAlive)
			p.ServerKeepAlive = o.ka
		}
		if o.capped {
			p.Has.Set(packet.PropSessionExpiry)
			p.SessionExpiry = o.expiry
		}
		if cp.Props.Has.Has(packet.PropAuthMethod) {
			p.AuthMethod = []byte(c.info.authMethod()) // [MQTT-4.12.0-5]
		}
	}
}

// refuseDecode answers a CONNECT that failed to decode.
func (c *conn) refuseDecode(cp *packet.Connect, err error) {
	code := reasonOf(err)
	switch {
	case errors.Is(err, packet.ErrUnsupportedProtocolVersion):
		// [MQTT-3.1.2-2] answer in the 3.1.1 format with return code 1,
		// whatever level the client asked for.
		c.version = packet.Version311
		c.refuse(packet.ErrUnsupportedProtocolVersion)
	case cp.Version == packet.Version5 && bytes.Equal(cp.ProtocolName, []byte("MQTT")):
		c.version = packet.Version5
		c.refuse(code) // MQTT 5.0 section 3.1.4: CONNACK with a reason code, then close
	case errors.Is(err, packet.ErrClientIDNotValid):
		c.version = packet.Version311
		c.refuse(code) // [MQTT-3.1.3-9] return code 2
	default:
		// 3.1.1: a malformed CONNECT closes the connection without a
		// CONNACK [MQTT-3.1.4-1].
	}
}

// refuse writes a CONNACK with a failure code and no session present
// [MQTT-3.2.2-4] [MQTT-3.2.2-6]; the caller closes.
func (c *conn) refuse(code packet.ReasonCode) {
	if c.version == 0 {
		c.version = packet.Version311
	}
	ack := packet.Connack{Reason: code}
	b, err := ack.Append(nil, c.version)
	if err != nil {
		ack.Reason = packet.ErrUnspecified
		b, _ = ack.Append(nil, c.version)
	}
	_ = c.nc.SetWriteDeadline(time.Now().Add(closeFlushTimeout))
	_, _ = c.nc.Write(b)
	c.debug("connection refused", "reason", code)
}

// redeliverLocked queues again, in their original order, every inflight
// message of a resumed session: PUBLISH with DUP set, or PUBREL for those
// already acknowledged with PUBREC [MQTT-4.4.0-1].
func (c *conn) redeliverLocked() {
	sess := c.sess
	if len(sess.inflight) == 0 {
		return
	}
	list := make([]delivery, 0, len(sess.inflight))
	for _, d := range sess.inflight {
		list = append(list, d)
	}
	slices.SortFunc(list, func(a, b delivery) int { return cmp.Compare(a.seq, b.seq) })
	now := time.Now().UnixNano()
	inWindow := 0
	var requeue []delivery
	for i := range list {
		d := &list[i]
		if d.state == stateReleased {
			rel := packet.Ack{Type: packet.TypePubrel, PacketID: d.id}
			c.sendLocked(&rel)
			inWindow++
			continue
		}
		if inWindow >= int(c.window) {
			// The client's new Receive Maximum is smaller: the rest wait
			// in the queue, ahead of newer messages [MQTT-3.3.4-9].
			if c.sentLogged(d) {
				_, _ = c.appendQoS2Locked(store.StateOutCompleted, d.id) // sent anew under another id (qos2.go)
			}
			delete(sess.inflight, d.id)
			d.id, d.state = 0, stateQueued
			requeue = append(requeue, *d)
			continue
		}
		if d.msg.stored {
			// Redelivery goes out with the control packets: read the
			// payload back from the log.
			m, err := c.shard.materialize(d.msg)
			if err != nil {
				c.logger().Warn("inflight message unreadable; dropped", "err", err)
				delete(sess.inflight, d.id)
				reason := DropExpired
				if errors.Is(err, errLost) {
					reason = DropRetention // its segment was deleted by retention
				}
				sess.dropLocked(reason)
				continue
			}
			d.msg.unref()
			d.msg = m
			sess.inflight[d.id] = *d
		}
		start := len(c.ctrl)
		hdr, ok := c.encodePublishLocked(c.ctrl, d, true, now)
		if !ok {
			c.ctrl = c.ctrl[:start]
			delete(sess.inflight, d.id)
			sess.deadLetterLocked(DropTooLarge, d.msg, d.qos) // [MQTT-3.1.2-25]
			d.msg.unref()
			continue
		}
		c.ctrl = append(hdr, d.msg.payload...)
		c.shard.stats.msgsOut.Add(1)
		c.info.Traffic.addMessagesOut(1)
		inWindow++
	}
	// Stored messages go back to the front of the stored ring (it is
	// drained before the queue), the others to the front of the queue.
	var front []storedEntry
	mem := requeue[:0]
	for _, d := range requeue {
		if d.msg.stored {
			front = append(front, d.storedEntry())
			d.msg.unref()
		} else {
			mem = append(mem, d)
		}
	}
	requeue = mem
	if len(front) > 0 {
		for sess.stored.len() > 0 {
			front = append(front, sess.stored.pop())
		}
		for _, e := range front {
			sess.pushStoredLocked(e)
		}
	}
	if len(requeue) > 0 {
		for _, d := range requeue {
			sess.queuedBytes += d.msg.size
		}
		for sess.queue.len() > 0 {
			requeue = append(requeue, sess.queue.pop())
		}
		for _, d := range requeue {
			sess.queue.push(d)
		}
	}
}
