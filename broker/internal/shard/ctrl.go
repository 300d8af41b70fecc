package shard

import "berth.dev/broker/packet"

// wakeWriter tells the writer there is something to send, starting it if
// none runs.
func (c *conn) wakeWriter() {
	select {
	case c.wakeChan() <- struct{}{}:
	default:
	}
	c.startWriter()
}

// wakeChan returns the writer's wake-up channel, making it on first use.
func (c *conn) wakeChan() chan struct{} {
	if p := c.wake.Load(); p != nil {
		return *p
	}
	ch := make(chan struct{}, 1)
	if c.wake.CompareAndSwap(nil, &ch) {
		return ch
	}
	return *c.wake.Load()
}

// startWriter starts the writer goroutine unless one runs. A writer exits
// after writerIdle without work, so an idle connection costs no writer.
func (c *conn) startWriter() {
	if c.writing.CompareAndSwap(false, true) {
		c.shard.opts.probe.writer()
		go c.writeLoop()
	}
}

// sendLocked queues an encoded control packet; sess.mu is held.
func (c *conn) sendLocked(p interface {
	Append([]byte, byte) ([]byte, error)
}) {
	if c.closing {
		return
	}
	var err error
	c.ctrl, err = p.Append(c.ctrl, c.version)
	c.queuedLocked(err)
}

// sendAckLocked queues a PUBACK, PUBREC, PUBREL or PUBCOMP; sess.mu is
// held. Unlike sendLocked it needs no packet value that outlives it.
func (c *conn) sendAckLocked(t packet.Type, id uint16, code packet.ReasonCode) {
	if c.closing {
		return
	}
	a := packet.Ack{Type: t, PacketID: id, Reason: code}
	var err error
	c.ctrl, err = a.Append(c.ctrl, c.version)
	c.queuedLocked(err)
}

// queuedLocked checks a control packet just appended to c.ctrl.
func (c *conn) queuedLocked(err error) {
	if err != nil {
		c.logger().Error("encoding packet", "err", err)
	}
	if len(c.ctrl) > c.shard.maxCtrlBytes() {
		c.ctrlFull.Store(true)
	}
}

// maxCtrlBytes bounds the control packets (acks, PINGRESP) waiting for a
// client that does not read: a quarter of the queue bound, at least 64 KiB.
func (s *Shard) maxCtrlBytes() int { return max(64<<10, int(s.maxQueuedBytes.Load())/4) }

// send queues a control packet for the reader's outbox; reader only.
func (c *conn) send(p interface {
	Append([]byte, byte) ([]byte, error)
}) {
	c.sess.mu.Lock()
	c.sendLocked(p)
	c.sess.mu.Unlock()
	c.outbox().add(c)
}
