package shard

import (
	"net"
	"time"
	"weak"
)

// A parked connection that is quiet (woken only by PINGREQs since its
// last park, or nothing since CONNECT) and holds no write state (no
// batch, no writer, nothing pending) parks without its net.Conn: the
// reader takes a duplicate of the socket's descriptor
// (F_DUPFD_CLOEXEC), closes the net.Conn, whose netFD, addresses and the
// runtime's pollDesc (512 B, off the heap) go back, and arms the dup in
// the poller; the dup keeps the socket open, so the peer sees nothing
// (docs/idle-connections.md, "Where the held bytes go now").
//
// Whoever needs the socket again attaches it (attachLocked): the dup
// leaves the poller's set, net.FileConn builds a new net.Conn on the
// socket, the dup is closed. That is the resumed reader (resume,
// unpark) and a writer goroutine (writeLoop), both before anything else.
// Publishers writing inline need no net.Conn: tryWritev writes to the dup.
//
// The socket fields (c.nc, or the inner conn of a socketWrapper, and
// w.raw's rc and fd) change only with both c.w.mu and c.sess.mu held;
// anyone holding either may read them. The dup is closed under c.w.mu
// only, which every use of it holds. The reader, once it runs and has
// attached, reads them without a lock: only the reader detaches.
//
// Paths that must not wait for c.w.mu (a writer may hold it across a
// blocking write) look under c.sess.mu instead and skip a detached
// socket: kick's read deadline (the parked reader is resumed instead),
// the kill timer (no write can hang on a detached socket: a writer
// attaches first), End's identity check.

// socketWrapper is a net.Conn wrapping a socket whose writes and reads
// pass through unchanged (the node's PROXY protocol conn) and whose
// socket the shard may replace: a parked connection's wrapper keeps its
// identity (End, the node's tracking) while the socket under it is
// detached and rebuilt.
type socketWrapper interface {
	NetConn() net.Conn
	SetNetConn(net.Conn)
}

// tcpSocket is the connection's socket when it can be detached: a
// *net.TCPConn handed to Serve, or one under a socketWrapper.
func (c *conn) tcpSocket() *net.TCPConn {
	switch nc := c.nc.(type) {
	case *net.TCPConn:
		return nc
	case socketWrapper:
		tc, _ := nc.NetConn().(*net.TCPConn)
		return tc
	}
	return nil
}

// setSocketLocked replaces the connection's socket (c.w.mu and c.sess.mu
// held): under its wrapper, or c.nc itself. A bare socket detached for
// the first time leaves a weak reference for End to find it by.
func (c *conn) setSocketLocked(nc net.Conn, old *net.TCPConn) {
	if w, ok := c.nc.(socketWrapper); ok {
		w.SetNetConn(nc)
		return
	}
	if old != nil && c.park.ident == (weak.Pointer[net.TCPConn]{}) {
		if tc, ok := c.nc.(*net.TCPConn); ok && tc == old {
			c.park.ident = weak.Make(old)
		}
	}
	c.nc = nc
}

// attachedLocked reports whether the connection has its net.Conn (or
// never parks without it); c.w.mu or c.sess.mu is held.
func (c *conn) attachedLocked() bool {
	return c.w.raw == nil || c.w.raw.rc != nil
}

// isConn reports whether nc, whose weak reference (if a *net.TCPConn)
// is wk, is the net.Conn handed to Serve for c (End); c.sess.mu is held,
// or c is not attached to its session yet.
func (c *conn) isConn(nc net.Conn, wk weak.Pointer[net.TCPConn]) bool {
	return c.nc == nc || wk != (weak.Pointer[net.TCPConn]{}) && c.park.ident == wk
}

// reattach gives a reader that runs again after parking without its
// socket the socket back, and its packet reader a source on it.
// Reader only.
func (c *conn) reattach() {
	k := &c.park
	if !k.detached {
		return
	}
	c.w.mu.Lock()
	c.attachLocked() // unless a writer did already
	c.w.mu.Unlock()
	k.detached = false
	c.rd.Reset(c.w.raw.reader(c.nc))
}

// killSocket is the kill timer's: it closes a socket whose final flush
// hangs. A detached one has no write in progress (a writer attaches
// first), and its reader, resumed by the kick that armed the timer,
// closes it.
func (c *conn) killSocket() {
	c.sess.mu.Lock()
	defer c.sess.mu.Unlock()
	if c.attachedLocked() {
		_ = c.nc.Close()
	}
}

// closedConn stands for a socket that is gone: detached (a wrapper's
// while its connection parks), or that could not be rebuilt. Every call
// fails as on a closed net.Conn.
type closedConn struct{}

func (closedConn) Read([]byte) (int, error)         { return 0, net.ErrClosed }
func (closedConn) Write([]byte) (int, error)        { return 0, net.ErrClosed }
func (closedConn) Close() error                     { return net.ErrClosed }
func (closedConn) LocalAddr() net.Addr              { return (*net.TCPAddr)(nil) }
func (closedConn) RemoteAddr() net.Addr             { return (*net.TCPAddr)(nil) }
func (closedConn) SetDeadline(time.Time) error      { return net.ErrClosed }
func (closedConn) SetReadDeadline(time.Time) error  { return net.ErrClosed }
func (closedConn) SetWriteDeadline(time.Time) error { return net.ErrClosed }

// Detached counts the connections parked without their net.Conn
// (diagnostics, tests).
func (s *Shard) Detached() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := 0
	for c, attached := range s.conns {
		if !attached {
			continue
		}
		c.sess.mu.Lock()
		if !c.attachedLocked() {
			n++
		}
		c.sess.mu.Unlock()
	}
	return n
}
