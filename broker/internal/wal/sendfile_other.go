//go:build !linux

package wal

import (
	"io"
	"os"
	"syscall"
)

// Sendfile falls back to a buffered copy on systems other than Linux.
func Sendfile(dst syscall.Conn, f *os.File, off int64, n int) (int, error) {
	s, err := NewSender(dst)
	if err != nil {
		return 0, err
	}
	return s.Send(f, off, n)
}

// Sender sends file ranges to one socket. Without sendfile(2) it copies
// through a pooled buffer; it is not safe for concurrent use.
type Sender struct {
	w io.Writer
}

// NewSender prepares sends to c, which must also be an io.Writer (a
// *net.TCPConn, say).
func NewSender(c syscall.Conn) (*Sender, error) {
	w, ok := c.(io.Writer)
	if !ok {
		return nil, syscall.EINVAL
	}
	return &Sender{w: w}, nil
}

// Send sends n bytes of f from byte off.
func (s *Sender) Send(f *os.File, off int64, n int) (int, error) {
	return copyRange(s.w, f, off, n)
}

// SendRange writes n bytes of f from byte off to w through a pooled buffer.
func SendRange(w io.Writer, f *os.File, off int64, n int) (int, error) {
	return copyRange(w, f, off, n)
}

// SendPayload sends loc's payload to w.
func SendPayload(w io.Writer, loc Location) (int, error) {
	return SendRange(w, loc.File, loc.PayloadPos(), int(loc.PayloadSize))
}
