package shard

import (
	"io"

	"berth.dev/broker/packet"
)

// A reader that waited for input without a buffer (conn.idle: a reader
// that cannot park, one that parks at once, a parked connection woken by
// the poller) first peeks at what came, into a small array on its stack,
// and only then takes a buffer for it (docs/idle-connections.md, "The
// mass wake-up"; a busy reader keeps its buffer and reads, idleBusy):
//
//   - the end of the stream, or a reset: no buffer; the connection ends
//     on the reader's goroutine (teardown.go: no writer goroutine either);
//   - a few small whole packets (PINGREQ, DISCONNECT, a PUBACK, a short
//     PUBLISH), smallReadBufSize bytes at most: the small buffer inside the
//     reader's scratch (inbound.small), which handling any packet takes
//     anyway;
//   - anything else: a pooled 4 KiB read buffer (or a big one, readsBig).
//
// So a fleet that pings at once, or a load tool that closes thousands of
// connections at once, wakes readers that take no 4 KiB buffer each.

// smallReadBufSize is the peek's size and the small buffer's.
const smallReadBufSize = 64

// inputKind is what a peek found waiting on the socket.
type inputKind uint8

const (
	inputMore  inputKind = iota // more than a few small whole packets, or not known
	inputSmall                  // whole packets, smallReadBufSize bytes or fewer in all
	inputEnd                    // end of stream or an error: nothing to read
	inputWait                   // waitInto is waiting: nothing read yet
)

// classifyInput says what the peeked bytes b are; all is true when b is
// everything the socket held (the peek did not fill its array).
func classifyInput(b []byte, all bool) inputKind {
	if !all {
		return inputMore
	}
	for len(b) > 0 {
		fh, hn, err := packet.ParseFixedHeader(b)
		if err != nil || hn == 0 || hn+fh.Remaining > len(b) {
			return inputMore // malformed, or a part of a packet: the ordinary read sorts it out
		}
		b = b[hn+fh.Remaining:]
	}
	return inputSmall
}

// takeInputBuf gives the reader a buffer fit for the input waitReadable
// found: none for the end of the stream, whose error it returns (io.EOF,
// or the errno peeked); the small buffer in its scratch for a few small
// packets; else a pooled read buffer.
func (c *conn) takeInputBuf() error {
	switch c.w.raw.input {
	case inputEnd:
		return c.inputEnd()
	case inputSmall:
		c.rd.Use(c.scratch().small[:])
		return nil
	}
	c.takeReadBuf()
	return nil
}

// inputEnd is the error of the end of input a wait found: io.EOF, or the
// errno of a reset.
func (c *conn) inputEnd() error {
	if e := c.w.raw.inputErr; e != 0 {
		return e
	}
	return io.EOF
}
