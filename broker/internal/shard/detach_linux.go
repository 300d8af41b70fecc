package shard

import (
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// detachLocked parks the reader's socket without its net.Conn (detach.go)
// if the connection holds no write state: it reports whether it did.
// The reader calls it while it parks, with nothing buffered and no input
// buffer, c.w.mu held; the caller arms the dup (rawIO.fd) after it
// stores readerParked.
func (c *conn) detachLocked() bool {
	r := c.w.raw
	if r == nil || r.rc == nil || c.w.b != nil || c.w.pending || c.writing.Load() {
		return false
	}
	tc := c.tcpSocket()
	if tc == nil {
		return false
	}
	k := &c.park
	p := c.shard.opts.Poller
	dup, ok := -1, true
	err := r.rc.Control(func(fd uintptr) {
		if k.added.Load() {
			// The poller's item for this descriptor would outlive its
			// close, the dup keeping the socket open.
			if p.Disarm(fd) != nil {
				ok = false
				return
			}
			k.added.Store(false)
		}
		dup, _ = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	})
	if err != nil || !ok || dup < 0 {
		return false
	}
	sess := c.sess
	sess.mu.Lock()
	if c.closing || c.killArmedLocked() {
		sess.mu.Unlock()
		_ = unix.Close(dup)
		return false
	}
	c.setSocketLocked(closedConn{}, tc)
	r.rc, r.fd = nil, int32(dup)
	r.unbind()
	c.park.armFn, r.waits = nil, nil // bound again by attachLocked (bindParking)
	sess.mu.Unlock()
	c.w.sender = nil // sendfile to the old socket; made again on first use
	// Go's netpoll forgets the socket and frees its pollDesc; the dup
	// keeps the socket open, so nothing is sent to the peer.
	_ = tc.Close()
	return true
}

// attachLocked gives a connection parked without its net.Conn a new one
// on the same socket (detach.go), from any goroutine, c.w.mu held; a
// connection with its net.Conn is left alone. A socket that cannot be
// rebuilt (no descriptor left) is closed, and the connection fails as
// on a closed socket. When its reader is still parked, the new socket is
// armed in the poller in the dup's place, or the reader resumed.
func (c *conn) attachLocked() {
	r := c.w.raw
	if r == nil || r.rc != nil || r.fd < 0 {
		return
	}
	k := &c.park
	fd := uintptr(r.fd)
	if k.added.Load() {
		_ = c.shard.opts.Poller.Disarm(fd) // fails only once the poller is closed
		k.added.Store(false)
	}
	f := os.NewFile(fd, "")
	nc, err := net.FileConn(f) // a descriptor of its own
	_ = f.Close()              // the dup
	var sock net.Conn = closedConn{}
	var rc syscall.RawConn
	if tc, ok := nc.(*net.TCPConn); ok && err == nil {
		if src, err := tc.SyscallConn(); err == nil {
			sock, rc = tc, src
		}
	}
	if _, ok := sock.(closedConn); ok && nc != nil {
		_ = nc.Close()
	}
	c.sess.mu.Lock()
	c.setSocketLocked(sock, nil)
	if rc != nil {
		r.bind()
		c.bindParking()
	}
	r.rc = rc // nil: the connection fails as on a closed socket
	r.fd = -1
	c.sess.mu.Unlock()
	if r.rc == nil || c.pstate.Load() != readerParked {
		return
	}
	fails := k.fails.Load()
	if err := r.rc.Control(k.armFn); err != nil || k.fails.Load() != fails {
		c.wakeParked() // not armed: let the reader see to its socket
	}
}
