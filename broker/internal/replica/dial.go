package replica

import (
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// The connections this node dials: one per peer for its queued frames
// (sendLoop, redialled with backoff) and one per snapshot stream (stream).
const (
	dialTimeout      = 2 * time.Second
	handshakeTimeout = 5 * time.Second
	redialMin        = 50 * time.Millisecond
	redialMax        = time.Second
)

func (t *Transport) sendLoop(p *peer) {
	defer t.wg.Done()
	backoff := redialMin
	for {
		conn, fw, err := t.dial(p)
		if err != nil {
			t.log.Debug("replica: dial peer", "peer", p.id, "err", err)
			if !t.dropFor(p, backoff) {
				return
			}
			backoff = min(2*backoff, redialMax)
			continue
		}
		backoff = redialMin
		err = t.pump(p, fw)
		conn.Close()
		t.mu.Lock()
		p.conn = nil
		t.mu.Unlock()
		if err == nil {
			return // stopped
		}
		t.log.Debug("replica: peer connection lost", "peer", p.id, "err", err)
	}
}

func (t *Transport) dial(p *peer) (net.Conn, *frameWriter, error) {
	conn, err := net.DialTimeout("tcp", p.addr, dialTimeout)
	if err != nil {
		return nil, nil, err
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		conn.Close()
		return nil, nil, net.ErrClosed
	}
	p.conn = conn
	t.mu.Unlock()
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	conn.SetDeadline(time.Now().Add(handshakeTimeout))
	key, err := clientHandshake(conn, t.secret, t.id, p.id)
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	conn.SetDeadline(time.Time{})
	return conn, newFrameWriter(conn, key), nil
}

// dropFor discards what is queued for a peer that cannot be reached, for d;
// it reports false when the transport stops.
func (t *Transport) dropFor(p *peer, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case f := <-p.q:
			p.take(f)
			t.dropped.Add(1)
		case <-timer.C:
			return true
		case <-t.stop:
			return false
		}
	}
}

// pump writes queued frames, flushing when the queue is empty (many frames
// per write(2) under load). It returns nil when the transport stops.
func (t *Transport) pump(p *peer, fw *frameWriter) error {
	for {
		var f outFrame
		select {
		case f = <-p.q:
		case <-t.stop:
			return nil
		}
		for {
			p.take(f)
			var n int
			var err error
			if f.msg != nil {
				n, err = fw.writeMsg(f.kind, f.group, f.msg)
			} else {
				n, err = fw.write(f.kind, f.group, f.payload)
			}
			switch {
			case errors.Is(err, errMarshal):
				t.dropped.Add(1)
				t.log.Warn("replica: raft message not sent", "peer", p.id, "group", f.group, "err", err)
			case err != nil:
				return err
			default:
				t.framesOut.Add(1)
				t.bytesOut.Add(uint64(n))
			}
			select {
			case f = <-p.q:
				continue
			default:
			}
			break
		}
		if err := fw.flush(); err != nil {
			return err
		}
	}
}

// stream dials a connection of its own to peer to (same handshake, same
// frames) for one long transfer, a snapshot: write sends its frames (each
// write bounded by snapIOTimeout, TCP's flow control instead of the peer
// queue's drops), then the connection is half-closed and stream waits
// until the peer has read everything and closed its side.
func (t *Transport) stream(to, group uint64, write func(send func(kind byte, payload []byte) error) (int64, error)) (int64, error) {
	if t.partitioned(to) {
		return 0, fmt.Errorf("replica: stream to %d: partitioned", to)
	}
	t.mu.Lock()
	p := t.peers[to]
	if p == nil || t.closed {
		t.mu.Unlock()
		return 0, fmt.Errorf("%w: %d", ErrUnknownPeer, to)
	}
	addr := p.addr
	t.wg.Add(1)
	t.mu.Unlock()
	defer t.wg.Done()
	conn, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return 0, net.ErrClosed
	}
	t.streams[conn] = struct{}{}
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		delete(t.streams, conn)
		t.mu.Unlock()
	}()
	conn.SetDeadline(time.Now().Add(handshakeTimeout))
	key, err := clientHandshake(conn, t.secret, t.id, to)
	if err != nil {
		return 0, err
	}
	fw := newFrameWriter(conn, key)
	n, err := write(func(kind byte, payload []byte) error {
		conn.SetDeadline(time.Now().Add(snapIOTimeout))
		if t.partitioned(to) {
			return fmt.Errorf("replica: stream to %d: partitioned", to)
		}
		n, err := fw.write(kind, group, payload)
		if err != nil {
			return err
		}
		t.framesOut.Add(1)
		t.bytesOut.Add(uint64(n))
		return nil
	})
	if err == nil {
		err = fw.flush()
	}
	if err != nil {
		return n, err
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	conn.SetDeadline(time.Now().Add(snapIOTimeout))
	if _, err := io.Copy(io.Discard, conn); err != nil {
		return n, fmt.Errorf("replica: stream to %d: waiting for the peer: %w", to, err)
	}
	return n, nil
}
