package packet

import (
	"errors"
	"io"
)

// ErrNoProgress is returned when the underlying reader keeps returning no
// data and no error.
var ErrNoProgress = errors.New("packet: reader made no progress")

// Reader reads whole packets from a stream with one reusable buffer. It
// never allocates per packet once the buffer has grown to the largest packet
// seen, and never grows past the caller's maximum packet size: the declared
// length is checked before any body byte is read, and the buffer grows only
// as body bytes actually arrive, so a huge declared length costs nothing
// until the peer sends the data.
//
// A packet can also be read in two steps, Header then Body or BodyInto,
// so that the caller sees the fixed header before choosing where the body
// goes: BodyInto reads it straight from the stream into the caller's
// buffer (a big PUBLISH into the message that will hold it), copying only
// what was already buffered.
type Reader struct {
	r          io.Reader
	buf        []byte
	start, end int // unread bytes are buf[start:end]
	// The fixed header Header returned, at buf[start:start+hn], whose
	// body is still to be read; hn is 0 when there is none.
	fh FixedHeader
	hn int
}

// errNoHeader is returned by Body and BodyInto without a Header first.
var errNoHeader = errors.New("packet: body read without its fixed header")

// NewReader returns a Reader with an initial buffer of bufSize bytes
// (at least 16).
func NewReader(r io.Reader, bufSize int) *Reader {
	return &Reader{r: r, buf: make([]byte, max(bufSize, 16))}
}

// Reset makes r read from src, keeping its buffer, so one Reader can serve
// connection after connection. Buffered bytes are dropped.
func (r *Reader) Reset(src io.Reader) {
	r.r = src
	r.start, r.end, r.hn = 0, 0, 0
}

// Release takes the Reader's buffer away and returns it, so that a
// connection waiting for input holds none; it returns nil, and keeps the
// buffer, while bytes are buffered. Give the Reader a buffer (Use) before
// the next ReadPacket.
func (r *Reader) Release() []byte {
	if r.end != r.start || r.buf == nil {
		return nil
	}
	b := r.buf
	r.buf, r.start, r.end = nil, 0, 0
	return b
}

// Use gives a Reader without a buffer (after Release) buf to read into,
// all of its capacity.
func (r *Reader) Use(buf []byte) {
	if r.buf == nil {
		r.buf, r.start, r.end = buf[:cap(buf)], 0, 0
	}
}

// Buffered returns the number of bytes read from the stream but not yet
// returned as packets.
func (r *Reader) Buffered() int { return r.end - r.start }

// Ready reports whether the next ReadPacket returns without reading from
// the stream: a whole packet, or a bad fixed header, is buffered.
func (r *Reader) Ready() bool {
	fh, hn, err := ParseFixedHeader(r.buf[r.start:r.end])
	return err != nil || hn > 0 && r.end-r.start >= hn+fh.Remaining
}

// ReadPacket reads the next packet and returns its fixed header and body.
// The body aliases the Reader's buffer and is valid until the next call.
//
// maxSize is the largest whole packet (fixed header included, as the MQTT 5
// Maximum Packet Size counts it) the caller accepts; 0 or less means the
// protocol maximum. A larger packet returns an error that errors.Is
// ErrPacketTooLarge, before its body is read. A bad fixed header is
// ErrMalformed. A stream ending between packets returns io.EOF; inside a
// packet, io.ErrUnexpectedEOF. After any error the stream position is
// undefined: close the connection (or Reset) rather than read on.
func (r *Reader) ReadPacket(maxSize int) (FixedHeader, []byte, error) {
	fh, err := r.Header(maxSize)
	if err != nil {
		return fh, nil, err
	}
	body, err := r.Body()
	return fh, body, err
}

// Header reads the next packet's fixed header and checks it as ReadPacket
// does (maxSize, ErrPacketTooLarge, ErrMalformed, io.EOF), leaving its body
// unread: Body or BodyInto reads it. Called again before that, it returns
// the same header.
func (r *Reader) Header(maxSize int) (FixedHeader, error) {
	if r.hn > 0 {
		return r.fh, nil
	}
	if maxSize <= 0 || maxSize > MaxPacketSize {
		maxSize = MaxPacketSize
	}
	// The fixed header: 2 to 5 bytes.
	var fh FixedHeader
	var hn int
	for {
		var err error
		fh, hn, err = ParseFixedHeader(r.buf[r.start:r.end])
		if err != nil {
			return fh, err
		}
		if hn > 0 {
			break
		}
		if err := r.fill(r.start + 5); err != nil {
			return fh, err
		}
	}
	if hn+fh.Remaining > maxSize {
		return fh, errorf(ErrPacketTooLarge, fh.Type, "packet larger than the maximum packet size")
	}
	r.fh, r.hn = fh, hn
	return fh, nil
}

// Body reads the body of the packet whose fixed header Header returned.
// It aliases the Reader's buffer and is valid until the next call.
func (r *Reader) Body() ([]byte, error) {
	if r.hn == 0 {
		return nil, errNoHeader
	}
	total := r.hn + r.fh.Remaining
	for r.end-r.start < total {
		if err := r.fill(r.start + total); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	body := r.buf[r.start+r.hn : r.start+total : r.start+total]
	r.consume(total)
	return body, nil
}

// BodyInto reads the body of the packet whose fixed header Header
// returned into dst, which must be exactly its remaining length long. The
// part already buffered is copied; the rest is read from the stream
// straight into dst, never past the packet's end, and the Reader's buffer
// does not grow. After an error the stream position is undefined, as for
// ReadPacket; dst's contents then are too.
func (r *Reader) BodyInto(dst []byte) error {
	if r.hn == 0 {
		return errNoHeader
	}
	if len(dst) != r.fh.Remaining {
		return errorf(ErrMalformed, r.fh.Type, "body buffer differs from remaining length")
	}
	n := copy(dst, r.buf[r.start+r.hn:r.end])
	r.consume(r.hn + n)
	for idle := 0; n < len(dst); {
		m, err := r.r.Read(dst[n:])
		n += m
		switch {
		case m > 0:
			idle = 0
		case err == io.EOF:
			return io.ErrUnexpectedEOF
		case err != nil:
			return err
		default:
			if idle++; idle == 100 {
				return ErrNoProgress
			}
		}
	}
	return nil
}

// consume drops n buffered bytes, the packet just read, and with them the
// pending fixed header.
func (r *Reader) consume(n int) {
	r.start += n
	if r.start == r.end {
		r.start, r.end = 0, 0
	}
	r.hn = 0
}

// fill reads once from the stream into the free space after buf[end],
// first compacting or growing the buffer when it is full. want is the index
// in buf up to which the current packet needs bytes; the buffer grows by
// doubling but never past want-start, so growth tracks the bytes actually
// received. io.EOF is returned only when nothing is buffered.
func (r *Reader) fill(want int) error {
	if r.end == len(r.buf) {
		n := r.end - r.start
		if r.start > 0 {
			copy(r.buf, r.buf[r.start:r.end])
		} else {
			nb := make([]byte, min(2*len(r.buf), want-r.start))
			copy(nb, r.buf[r.start:r.end])
			r.buf = nb
		}
		r.start, r.end = 0, n
	}
	for range 100 {
		m, err := r.r.Read(r.buf[r.end:])
		r.end += m
		if m > 0 {
			return nil
		}
		if err != nil {
			if err == io.EOF && r.end > r.start {
				return io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return ErrNoProgress
}
