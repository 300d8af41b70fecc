package proxyproto

import (
	"fmt"
	"io"
	"time"
)

// DeadlineReader is the part of net.Conn that ReadHeader needs.
type DeadlineReader interface {
	io.Reader
	SetReadDeadline(time.Time) error
}

// ReadHeader reads exactly one PROXY v2 header from r and returns it in
// buf (grown if needed): first the 16 fixed bytes, then exactly the length
// they announce, never a byte of what follows, so the caller can hand r to
// an MQTT reader (or splice it) afterwards. The whole read must finish
// within timeout; the read deadline is cleared again on success. A header
// larger than maxLen bytes (MaxLen when 0 or less) is refused before its
// body is read.
func ReadHeader(r DeadlineReader, timeout time.Duration, maxLen int, buf []byte) ([]byte, error) {
	if maxLen <= 0 || maxLen > MaxLen {
		maxLen = MaxLen
	}
	if err := r.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return buf[:0], err
	}
	buf = append(buf[:0], make([]byte, FixedLen)...)
	if _, err := io.ReadFull(r, buf); err != nil {
		return buf[:0], fmt.Errorf("proxyproto: read header: %w", err)
	}
	n, err := HeaderLen(buf)
	if err != nil {
		return buf[:0], err
	}
	if n > maxLen {
		return buf[:0], fmt.Errorf("%w (%d > %d)", ErrTooLarge, n, maxLen)
	}
	if cap(buf) < n {
		nb := make([]byte, FixedLen, n)
		copy(nb, buf)
		buf = nb
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf[FixedLen:]); err != nil {
		return buf[:0], fmt.Errorf("proxyproto: read header: %w", err)
	}
	if err := r.SetReadDeadline(time.Time{}); err != nil {
		return buf[:0], err
	}
	return buf, nil
}
