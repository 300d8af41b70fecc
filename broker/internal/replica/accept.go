package replica

import (
	"errors"
	"net"
	"time"
)

// acceptLoop accepts the connections peers dial, each served (handshake,
// then frames to the handler) by its own goroutine, until the transport
// stops.
func (t *Transport) acceptLoop() {
	defer t.wg.Done()
	for {
		conn, err := t.ln.Accept()
		if err != nil {
			select {
			case <-t.stop:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			t.log.Warn("replica: accept", "err", err)
			continue
		}
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			conn.Close()
			return
		}
		t.accepted[conn] = struct{}{}
		t.mu.Unlock()
		t.connsAccepted.Add(1)
		t.wg.Add(1)
		go t.serve(conn)
	}
}

func (t *Transport) serve(conn net.Conn) {
	defer t.wg.Done()
	defer func() {
		conn.Close()
		t.mu.Lock()
		delete(t.accepted, conn)
		t.mu.Unlock()
	}()
	conn.SetDeadline(time.Now().Add(handshakeTimeout))
	from, key, err := serverHandshake(conn, t.secret, t.id, t.known)
	if err != nil {
		t.authFailures.Add(1)
		t.log.Warn("replica: peer refused", "remote", conn.RemoteAddr().String(), "err", err)
		return
	}
	conn.SetDeadline(time.Time{})
	cs := &connState{}
	defer t.handle.connEnded(cs)
	fr := newFrameReader(conn, key)
	for {
		kind, group, payload, err := fr.read()
		if err != nil {
			if errors.Is(err, ErrFrameMAC) || errors.Is(err, ErrFrameSize) {
				t.macFailures.Add(1)
				t.log.Warn("replica: peer frame refused, closing", "peer", from, "err", err)
			}
			return
		}
		if t.partitioned(from) {
			continue
		}
		t.framesIn.Add(1)
		t.bytesIn.Add(frameBytes(len(payload)))
		t.handle.handleFrame(cs, from, kind, group, payload)
	}
}
