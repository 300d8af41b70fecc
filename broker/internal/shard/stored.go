package shard

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"berth.dev/broker/internal/store"
	"berth.dev/broker/internal/wal"
	"berth.dev/broker/packet"
)

// storedEntry is one pending delivery that lives in the message log, not
// in memory: 16 bytes per message per session, whatever the payload size.
// Offline persistent sessions queue these ("a compact queue"); the writer
// turns them back into PUBLISH packets whose payload goes from the segment
// file to the socket.
type storedEntry struct {
	off    uint64 // log offset (not plus one)
	subID  uint32 // first subscription identifier, 0 none
	qos    uint8
	retain bool
}

// offRing is a growable FIFO of storedEntry.
type offRing struct {
	buf []storedEntry
	// 32 bits each (a ring never holds 2^31 entries): the session's 8 B
	// (TestConnStateSize).
	head, size int32
}

func (r *offRing) len() int { return int(r.size) }

func (r *offRing) push(e storedEntry) {
	if int(r.size) == len(r.buf) {
		nb := make([]storedEntry, max(4, 2*len(r.buf)))
		for i := range int(r.size) {
			nb[i] = r.buf[(int(r.head)+i)%len(r.buf)]
		}
		r.buf, r.head = nb, 0
	}
	r.buf[(int(r.head)+int(r.size))%len(r.buf)] = e
	r.size++
}

func (r *offRing) peek() *storedEntry { return &r.buf[r.head] }

func (r *offRing) at(i int) *storedEntry { return &r.buf[(int(r.head)+i)%len(r.buf)] }

func (r *offRing) pop() storedEntry {
	e := r.buf[r.head]
	r.head = int32((int(r.head) + 1) % len(r.buf))
	r.size--
	if r.size == 0 {
		r.buf, r.head = nil, 0 // an idle session keeps no ring memory
	}
	return e
}

// payloadLen is the payload size, in memory or in the log.
func (m *message) payloadLen() int {
	if m.stored {
		return m.payLen
	}
	return len(m.payload)
}

// addRemaining adds extra to the Remaining Length of the packet header
// starting at b[start] (its fixed header), moving the bytes after it when
// the varint grows. It is how a header is built for a payload that is not
// in memory.
func addRemaining(b []byte, start, extra int) []byte {
	rem, n := 0, 0
	for shift := 0; n < 4; shift += 7 {
		v := b[start+1+n]
		rem |= int(v&0x7f) << shift
		n++
		if v&0x80 == 0 {
			break
		}
	}
	rem += extra
	var vb [4]byte
	m := 0
	for {
		v := byte(rem & 0x7f)
		rem >>= 7
		if rem > 0 {
			v |= 0x80
		}
		vb[m] = v
		m++
		if rem == 0 {
			break
		}
	}
	if m > n {
		end := len(b)
		b = append(b, vb[:m-n]...)
		copy(b[start+1+m:], b[start+1+n:end])
	}
	copy(b[start+1:], vb[:m])
	return b
}

// keyBufs pools the buffers message-log keys are encoded into.
var keyBufs = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

// appendLocked appends m to the message log and records its offset. It is
// called with s.mu read-locked, so that a checkpoint (which takes s.mu)
// never sees a message appended but not yet routed. The key is the
// message's metadata (store.AppendMeta), the payload is the application
// payload as-is, so replay can send it with sendfile.
func (s *Shard) appendLocked(m *message) error {
	bp := keyBufs.Get().(*[]byte)
	props := m.props.full()
	key := store.AppendMeta((*bp)[:0], m.topic, m.qos, m.retain, m.created, m.expireAt, &props)
	var pub *session
	if m.inID != 0 {
		if pub = s.byID[m.publisher]; pub != nil {
			key = store.AppendOrigin(key, 0, pub.clientID, m.inID) // awaiting PUBREL (qos2.go)
		}
	}
	off, err := s.app.Append(key, m.payload, 1)
	*bp = key
	keyBufs.Put(bp)
	if err != nil {
		return err
	}
	m.off = off + 1
	if pub != nil {
		pub.awaitRelease(m.inID, m.off)
	}
	return nil
}

// refuseUnlogged answers a QoS 1/2 PUBLISH whose message could not be
// appended to the message log (a full disk, a failed fsync): it was routed
// to no one (publishVia) and is not acknowledged. An MQTT 5 publisher gets
// PUBACK/PUBREC 0x97 (quota exceeded) when the disk is full, 0x80
// otherwise, and stays connected, so it can publish again once the log
// takes writes; 3.1.1 has no refusal, so its connection is closed without
// the acknowledgement and the client sends the message again.
func (c *conn) refuseUnlogged(m *message, p *packet.Publish, tr *msgTrace) error {
	code := packet.ErrUnspecified
	if m.full {
		code = packet.ErrQuotaExceeded
	}
	if tr != nil {
		tr.endRoot(time.Now(), "not logged: refused "+code.String())
	}
	if c.version != packet.Version5 {
		return code
	}
	t := packet.TypePuback
	if p.QoS == 2 {
		t = packet.TypePubrec // a failure PUBREC ends the flow [MQTT-4.3.3]
	}
	c.sendAck(t, p.PacketID, code)
	return nil
}

// newStoredMessage builds a message read back from the log; its payload
// stays in the segment file.
func newStoredMessage(meta *store.Meta, off uint64, payLen int) *message {
	n := len(meta.Topic) + len(meta.Props.ContentType) + len(meta.Props.ResponseTopic) + len(meta.Props.CorrelationData)
	for _, up := range meta.Props.UserProperties {
		n += len(up.Key) + len(up.Value)
	}
	buf := make([]byte, 0, n)
	take := func(b []byte) []byte {
		if b == nil {
			return nil
		}
		start := len(buf)
		buf = append(buf, b...)
		return buf[start:len(buf):len(buf)]
	}
	m := &message{
		qos: meta.QoS, retain: meta.Retain, created: meta.Created, expireAt: meta.Expires,
		publisher: noPublisher, off: off + 1, stored: true, payLen: payLen,
	}
	m.topic = take(meta.Topic)
	if hasForwarded(&meta.Props) {
		pp := new(pubProps)
		m.props = pp
		pp.Has = meta.Props.Has & forwardedProps
		pp.PayloadFormat = meta.Props.PayloadFormat
		pp.MessageExpiry = meta.Props.MessageExpiry
		pp.ContentType = take(meta.Props.ContentType)
		pp.ResponseTopic = take(meta.Props.ResponseTopic)
		pp.CorrelationData = take(meta.Props.CorrelationData)
		if len(meta.Props.UserProperties) > 0 {
			pp.UserProperties = make([]packet.UserProperty, len(meta.Props.UserProperties))
			for i, up := range meta.Props.UserProperties {
				pp.UserProperties[i] = packet.UserProperty{Key: take(up.Key), Value: take(up.Value)}
			}
		}
	}
	m.propBytes = n - len(m.topic) + 5*len(meta.Props.UserProperties)
	m.size = len(m.topic) + m.propBytes + 64
	return m
}

// errLost means a stored entry's record is no longer in the log.
var errLost = errors.New("shard: stored message no longer in the log")

// materialize returns m with its payload in memory, reading it from the
// log if m is stored (redelivery of an inflight message, which goes out
// with the control packets).
func (s *Shard) materialize(m *message) (*message, error) {
	if !m.stored {
		return m, nil
	}
	if err := s.waitReadable(m.off - 1); err != nil {
		return nil, err
	}
	r, err := s.log.ReadFrom(m.off - 1)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errLost, err)
	}
	defer r.Close()
	rec, err := r.Next()
	if err != nil || rec.Offset != m.off-1 {
		return nil, fmt.Errorf("%w: offset %d: %v", errLost, m.off-1, err)
	}
	var meta store.Meta
	if _, err := store.DecodeMeta(rec.Key, &meta); err != nil {
		return nil, err
	}
	full := newStoredMessage(&meta, m.off-1, 0)
	full.stored, full.payLen = false, 0
	full.payload = append([]byte{}, rec.Payload...)
	full.size += len(full.payload)
	return full, nil
}

// storedReader reads stored entries for one connection's writer. It keeps
// one log Reader and moves it forward when the next entry lies ahead, so a
// replay in log order reads each header once.
type storedReader struct {
	rd   *wal.Reader
	next uint64 // offset after the last record the reader returned
	key  []byte // scratch for the record key
}

// skipAhead is how many records the reader scans forward before seeking
// anew instead.
const skipAhead = 256

// load returns the message at off (payload left in the file) and a
// Location holding the segment, to be Released after the payload is sent.
func (sr *storedReader) load(l *wal.Log, off uint64) (*message, wal.Location, error) {
	if sr.rd == nil || off < sr.next || off-sr.next > skipAhead {
		sr.close()
		r, err := l.ReadFrom(off)
		if err != nil {
			return nil, wal.Location{}, fmt.Errorf("%w: %w", errLost, err)
		}
		sr.rd, sr.next = r, off
	}
	for {
		loc, err := sr.rd.NextHeld()
		if err != nil {
			sr.close()
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("%w: offset %d", errLost, off)
			}
			return nil, wal.Location{}, err
		}
		sr.next = loc.Offset + uint64(loc.Count)
		if loc.Offset < off {
			loc.Release()
			continue
		}
		if loc.Offset > off {
			loc.Release()
			return nil, wal.Location{}, fmt.Errorf("%w: offset %d", errLost, off)
		}
		if cap(sr.key) < int(loc.KeySize) {
			sr.key = make([]byte, loc.KeySize)
		}
		key := sr.key[:loc.KeySize]
		if _, err := loc.File.ReadAt(key, loc.KeyPos()); err != nil {
			loc.Release()
			return nil, wal.Location{}, fmt.Errorf("shard: reading log key: %w", err)
		}
		var meta store.Meta
		if _, err := store.DecodeMeta(key, &meta); err != nil {
			loc.Release()
			return nil, wal.Location{}, err
		}
		return newStoredMessage(&meta, off, int(loc.PayloadSize)), loc, nil
	}
}

func (sr *storedReader) close() {
	if sr.rd != nil {
		_ = sr.rd.Close()
		sr.rd = nil
	}
}
