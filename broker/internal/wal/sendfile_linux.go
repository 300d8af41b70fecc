package wal

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
)

// Sendfile sends n bytes of f, starting at byte off, to the socket dst with
// sendfile(2): the bytes go from the page cache to the socket inside the
// kernel, never through this process's memory. The explicit offset means
// f's file position is neither used nor moved, so any number of senders can
// share one segment file. A socket that is not writable yet (EAGAIN) parks
// the goroutine in the network poller, like a normal Write. For many sends
// on one connection use a Sender, which does not allocate per call.
func Sendfile(dst syscall.Conn, f *os.File, off int64, n int) (int, error) {
	s, err := NewSender(dst)
	if err != nil {
		return 0, err
	}
	return s.Send(f, off, n)
}

// Sender sends file ranges to one socket with sendfile(2). It is not safe
// for concurrent use (a connection has one writer).
type Sender struct {
	rc  syscall.RawConn
	fn  func(fd uintptr) bool // bound once: Send allocates nothing
	src int
	off int64
	n   int
	sum int
	err error
}

// NewSender prepares sendfile(2) to the socket c (e.g. a *net.TCPConn).
func NewSender(c syscall.Conn) (*Sender, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	s := &Sender{rc: rc}
	s.fn = s.write
	return s, nil
}

// Send sends n bytes of f from byte off (see Sendfile).
func (s *Sender) Send(f *os.File, off int64, n int) (int, error) {
	s.src, s.off, s.n, s.sum, s.err = int(f.Fd()), off, n, 0, nil
	werr := s.rc.Write(s.fn)
	if s.err != nil {
		return s.sum, s.err
	}
	return s.sum, werr
}

// write is the RawConn callback; returning false waits for writability.
func (s *Sender) write(fd uintptr) bool {
	for s.sum < s.n {
		// sendfile advances s.off by what it sent.
		m, err := syscall.Sendfile(int(fd), s.src, &s.off, s.n-s.sum)
		if m > 0 {
			s.sum += m
		}
		switch {
		case err == syscall.EAGAIN:
			return false
		case err == syscall.EINTR:
			continue
		case err != nil:
			s.err = os.NewSyscallError("sendfile", err)
			return true
		case m == 0:
			s.err = io.ErrUnexpectedEOF // the file is shorter than asked
			return true
		}
	}
	return true
}

// SendRange writes n bytes of f from byte off to w: with Sendfile when w is
// a TCP or Unix socket, otherwise through a pooled buffer (pread + Write),
// e.g. for TLS or WebSocket connections.
func SendRange(w io.Writer, f *os.File, off int64, n int) (int, error) {
	switch c := w.(type) {
	case *net.TCPConn:
		return Sendfile(c, f, off, n)
	case *net.UnixConn:
		return Sendfile(c, f, off, n)
	}
	return copyRange(w, f, off, n)
}

// SendPayload sends loc's payload to w (see SendRange).
func SendPayload(w io.Writer, loc Location) (int, error) {
	if loc.File == nil {
		return 0, errors.New("wal: location without a file")
	}
	n, err := SendRange(w, loc.File, loc.PayloadPos(), int(loc.PayloadSize))
	if err != nil {
		return n, fmt.Errorf("wal: send offset %d: %w", loc.Offset, err)
	}
	return n, nil
}
