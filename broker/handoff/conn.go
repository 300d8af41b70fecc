package handoff

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"
)

// maxFDs bounds the descriptors one read takes: the kernel closes any
// beyond what the control buffer holds and sets MSG_CTRUNC.
const maxFDs = 4

// ErrPeer is Accept's refusal of a peer whose uid is neither the
// listener's own nor root's; the listener goes on accepting.
var ErrPeer = errors.New("handoff: peer process of another user")

// Frame is one frame read by Conn.ReadFrame.
type Frame struct {
	Type byte
	Body []byte // valid until the next ReadFrame
	// FDs are the descriptors that came with the frame's bytes: the
	// caller owns them (uses or closes every one). Valid until the next
	// ReadFrame.
	FDs []int
	// Truncated: the kernel dropped descriptors that did not fit
	// (MSG_CTRUNC).
	Truncated bool
}

// CloseFDs closes the frame's descriptors: what a receiver that takes
// none of them does.
func (f Frame) CloseFDs() {
	for _, fd := range f.FDs {
		_ = syscall.Close(fd)
	}
}

// Conn is one end of a handoff connection. Reads and writes may run
// concurrently with each other, but not reads with reads nor writes with
// writes.
type Conn struct {
	uc  *net.UnixConn
	buf []byte
	oob []byte
	fds []int
}

// NewConn wraps a Unix stream connection.
func NewConn(uc *net.UnixConn) *Conn {
	return &Conn{uc: uc, buf: make([]byte, prefixLen, 512), oob: make([]byte, syscall.CmsgSpace(maxFDs*4))}
}

// Dial connects to a node's handoff socket.
func Dial(path string) (*Conn, error) {
	uc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	return NewConn(uc), nil
}

// ReadFrame reads the next frame. It waits for the frame's first byte as
// long as it takes (an idle peer is fine, Close ends the wait); from
// then on the whole frame must arrive within timeout.
func (c *Conn) ReadFrame(timeout time.Duration) (Frame, error) {
	c.fds = c.fds[:0]
	c.buf = c.buf[:prefixLen]
	trunc, err := c.readFull(c.buf, true, timeout)
	if err == nil {
		var n int
		if n, err = frameLen(c.buf); err == nil {
			c.buf = append(c.buf[:prefixLen], make([]byte, n-1)...)
			var t bool
			t, err = c.readFull(c.buf[prefixLen:], false, timeout)
			trunc = trunc || t
		}
	}
	_ = c.uc.SetReadDeadline(time.Time{})
	if err != nil {
		c.closeFDs()
		return Frame{}, err
	}
	return Frame{Type: c.buf[4], Body: c.buf[prefixLen:], FDs: c.fds, Truncated: trunc}, nil
}

// readFull fills b, keeping the descriptors that come with its bytes.
// first: b starts a frame, so the deadline starts with its first byte.
func (c *Conn) readFull(b []byte, first bool, timeout time.Duration) (trunc bool, err error) {
	for got := 0; got < len(b); {
		n, oobn, flags, _, err := c.uc.ReadMsgUnix(b[got:], c.oob)
		if oobn > 0 {
			c.takeFDs(c.oob[:oobn])
		}
		trunc = trunc || flags&syscall.MSG_CTRUNC != 0
		if first && got == 0 && n > 0 {
			_ = c.uc.SetReadDeadline(time.Now().Add(timeout))
		}
		got += n
		switch {
		case err == io.EOF && (got > 0 || !first):
			return trunc, io.ErrUnexpectedEOF
		case err != nil:
			return trunc, err
		case n == 0:
			return trunc, io.ErrUnexpectedEOF
		}
	}
	return trunc, nil
}

// takeFDs keeps the descriptors of the control messages in oob, up to
// maxFDs in all; it closes the rest.
func (c *Conn) takeFDs(oob []byte) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return
	}
	for i := range msgs {
		fds, err := syscall.ParseUnixRights(&msgs[i])
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if len(c.fds) < maxFDs {
				c.fds = append(c.fds, fd)
			} else {
				_ = syscall.Close(fd)
			}
		}
	}
}

func (c *Conn) closeFDs() {
	Frame{FDs: c.fds}.CloseFDs()
	c.fds = c.fds[:0]
}

// Write writes whole frames (no descriptor).
func (c *Conn) Write(frames []byte) error {
	_, err := c.uc.Write(frames)
	return err
}

// WriteFDs writes one frame with fds as its descriptors (SCM_RIGHTS; a
// handoff has exactly one). The descriptors go with the frame's first
// bytes, so the reader finds them with the frame.
func (c *Conn) WriteFDs(frame []byte, fds ...int) error {
	var oob []byte
	if len(fds) > 0 {
		oob = syscall.UnixRights(fds...)
	}
	n, _, err := c.uc.WriteMsgUnix(frame, oob, nil)
	if err == nil && n < len(frame) {
		_, err = c.uc.Write(frame[n:])
	}
	return err
}

// Handoff sends a handoff frame with sock's descriptor: the gateway's
// side. The caller closes its own sock after the node's answer (taken),
// or keeps serving it (refused).
func (c *Conn) Handoff(id uint64, header []byte, sock syscall.Conn) error {
	frame, err := AppendHandoff(nil, id, header)
	if err != nil {
		return err
	}
	rc, err := sock.SyscallConn()
	if err != nil {
		return err
	}
	var werr error
	if err := rc.Control(func(fd uintptr) { werr = c.WriteFDs(frame, int(fd)) }); err != nil {
		return err
	}
	return werr
}

// SetReadDeadline bounds the wait for the next frame's first byte (the
// gateway waiting for an answer); ReadFrame clears it.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.uc.SetReadDeadline(t) }

// SetWriteDeadline bounds the writes that follow.
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.uc.SetWriteDeadline(t) }

// Close closes the connection; a ReadFrame waiting returns.
func (c *Conn) Close() error { return c.uc.Close() }

// Listener accepts handoff connections on a Unix socket.
type Listener struct {
	ul   *net.UnixListener
	uid  uint32 // the uid a peer must have (besides root)
	root bool   // root may connect
}

// Listen listens on a Unix socket at path with mode 0600. A stale socket
// left there (nothing listening) is replaced; a live one, or a file that
// is not a socket, is an error. Close removes the socket file.
func Listen(path string) (*Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("handoff: %s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			_ = c.Close()
			return nil, fmt.Errorf("handoff: %s is in use by another process", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("handoff: removing the stale socket: %w", err)
		}
	}
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("handoff: %w", err)
	}
	ul.SetUnlinkOnClose(true)
	// Before chmod, the directory's mode is what keeps others out; the
	// peer's uid is checked on every connection anyway.
	if err := os.Chmod(path, 0o600); err != nil {
		_ = ul.Close()
		return nil, fmt.Errorf("handoff: %w", err)
	}
	return &Listener{ul: ul, uid: uint32(os.Getuid()), root: true}, nil
}

// Accept waits for the next connection whose peer runs as this process's
// user or as root. Another user's connection is closed at once and
// reported as ErrPeer; other errors are the listener's.
func (l *Listener) Accept() (*Conn, error) {
	uc, err := l.ul.AcceptUnix()
	if err != nil {
		return nil, err
	}
	uid, err := peerUID(uc)
	if err != nil || !(uid == l.uid || (l.root && uid == 0)) {
		_ = uc.Close()
		return nil, fmt.Errorf("%w: uid %d (%v)", ErrPeer, uid, err)
	}
	return NewConn(uc), nil
}

// Addr is the socket's path.
func (l *Listener) Addr() net.Addr { return l.ul.Addr() }

// Close stops accepting and removes the socket file.
func (l *Listener) Close() error { return l.ul.Close() }
