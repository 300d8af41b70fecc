package store

import (
	"encoding/binary"
	"fmt"
)

// Message-log records of the QoS 2 flows (see doc.go, "QoS 2 state").
// The first byte of their key is the kind; message records start with a
// meta version (1 or 2) instead, so the two never mix. Never change.
const (
	// StateInReleased: the client's PUBREL for an inbound QoS 2 message
	// was received; its "awaiting PUBREL" marker (the origin of the
	// message record) is void. Payload: packet id 2 B.
	StateInReleased byte = 0x81
	// StateOutSent: the broker is about to send these logged messages
	// as QoS 2 PUBLISH to the session. Payload: per message, log offset
	// 8 B | packet id 2 B.
	StateOutSent byte = 0x82
	// StateOutReleased: the session's PUBREC was received; the broker
	// sends PUBREL, never the PUBLISH again. Payload: packet id 2 B.
	StateOutReleased byte = 0x83
	// StateOutCompleted: the flow of the packet id ended (PUBCOMP, or a
	// PUBREC with a failure reason). Payload: packet id 2 B.
	StateOutCompleted byte = 0x84
	// StateAcked: the session PUBACKed the QoS 1 deliveries of these
	// logged messages; a restart does not send them again. Payload: the
	// message log offsets in ascending order, the first as a uvarint,
	// each next one as the uvarint of its distance from the previous.
	StateAcked byte = 0x85
	// StateInAwaiting: the inbound QoS 2 message with this packet id
	// still awaits its PUBREL; written when retention deletes the message
	// record that marked it (version 2 meta), so the mark outlives it.
	// Payload: packet id 2 B.
	StateInAwaiting byte = 0x86
)

// IsStateKey reports whether a message-log key is that of a QoS 2 state
// record rather than a message.
func IsStateKey(key []byte) bool { return len(key) > 0 && key[0]&0x80 != 0 }

// AppendStateKey appends the key of a state record of kind for the
// session of clientID.
func AppendStateKey(dst []byte, kind byte, clientID string) []byte {
	dst = append(dst, kind)
	return appendString16(dst, clientID)
}

// DecodeStateKey decodes a state record key; clientID aliases key.
func DecodeStateKey(key []byte) (kind byte, clientID []byte, err error) {
	d := decoder{b: key}
	kind = d.byte()
	clientID = d.bytes16()
	if d.err != nil {
		return 0, nil, d.err
	}
	if kind < StateInReleased || kind > StateInAwaiting {
		return 0, nil, fmt.Errorf("%w: state record kind %#x", ErrBadRecord, kind)
	}
	return kind, clientID, nil
}

// AppendPacketID appends the payload of a StateInReleased,
// StateOutReleased, StateOutCompleted or StateInAwaiting record.
func AppendPacketID(dst []byte, id uint16) []byte {
	return binary.BigEndian.AppendUint16(dst, id)
}

// PacketID decodes the payload of a StateInReleased, StateOutReleased,
// StateOutCompleted or StateInAwaiting record.
func PacketID(payload []byte) (uint16, error) {
	if len(payload) != 2 {
		return 0, fmt.Errorf("%w: state record payload of %d bytes", ErrBadRecord, len(payload))
	}
	return binary.BigEndian.Uint16(payload), nil
}

// sentEntrySize is the size of one StateOutSent entry. Never change.
const sentEntrySize = 10

// AppendSent appends one entry of a StateOutSent payload.
func AppendSent(dst []byte, off uint64, id uint16) []byte {
	dst = binary.BigEndian.AppendUint64(dst, off)
	return binary.BigEndian.AppendUint16(dst, id)
}

// Sent calls fn for every entry of a StateOutSent payload, in order.
func Sent(payload []byte, fn func(off uint64, id uint16)) error {
	if len(payload)%sentEntrySize != 0 {
		return fmt.Errorf("%w: sent record payload of %d bytes", ErrBadRecord, len(payload))
	}
	for b := payload; len(b) > 0; b = b[sentEntrySize:] {
		fn(binary.BigEndian.Uint64(b), binary.BigEndian.Uint16(b[8:]))
	}
	return nil
}

// AppendOrigin turns the meta AppendMeta encoded at dst[start:] into a
// version 2 meta: the message is an inbound QoS 2 PUBLISH of clientID's
// session with packet id, awaiting its PUBREL. The marker is in the
// message's own record, so it is durable exactly when the message is.
func AppendOrigin(dst []byte, start int, clientID string, id uint16) []byte {
	dst[start] = metaVersionOrigin
	dst = binary.BigEndian.AppendUint16(dst, id)
	return appendString16(dst, clientID)
}

// AppendAcked appends the payload of a StateAcked record for offs,
// which must be sorted in ascending order.
func AppendAcked(dst []byte, offs []uint64) []byte {
	var prev uint64
	for _, off := range offs {
		dst = binary.AppendUvarint(dst, off-prev)
		prev = off
	}
	return dst
}

// Acked calls fn for every offset of a StateAcked payload, in order.
func Acked(payload []byte, fn func(off uint64)) error {
	var off uint64
	for b := payload; len(b) > 0; {
		d, n := binary.Uvarint(b)
		if n <= 0 || off+d < off {
			return fmt.Errorf("%w: acked record payload", ErrBadRecord)
		}
		off += d
		fn(off)
		b = b[n:]
	}
	return nil
}
