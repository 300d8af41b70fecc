//go:build !linux

package wal

import (
	"io"
	"os"
	"syscall"
)

// Sendfile falls back to a buffered copy on systems other than Linux.
func Sendfile(dst syscall.Conn, f *os.File, off int64, n int) (int, error) {
	w, ok := dst.(io.Writer)
	if !ok {
		return 0, syscall.EINVAL
	}
	return copyRange(w, f, off, n)
}

// SendRange writes n bytes of f from byte off to w through a pooled buffer.
func SendRange(w io.Writer, f *os.File, off int64, n int) (int, error) {
	return copyRange(w, f, off, n)
}

// SendPayload sends loc's payload to w.
func SendPayload(w io.Writer, loc Location) (int, error) {
	return SendRange(w, loc.File, loc.PayloadPos(), int(loc.PayloadSize))
}
