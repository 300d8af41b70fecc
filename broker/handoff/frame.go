package handoff

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Frame types (doc.go). They never change.
const (
	TypeHello   byte = 0x01
	TypeHandoff byte = 0x02
	TypeTaken   byte = 0x03
	TypeRefused byte = 0x04
	TypeClosed  byte = 0x05
	TypeClose   byte = 0x06
	// TypeCredentials follows the hello frames when they list devices: the
	// credential id of each (doc.go).
	TypeCredentials byte = 0x07
)

// MaxFrame bounds a frame's length field (type and body): a PROXY header
// of a few hundred bytes fits many times over, and a hello is split to fit.
const MaxFrame = 64 << 10

// prefixLen is the length field and the type.
const prefixLen = 5

// Reason says why a node refused a handoff. The values never change.
type Reason byte

const (
	// RefusedNotLeader: this node does not lead the tenant (or holds no
	// replica of it); the gateway relays to the leader over TCP.
	RefusedNotLeader Reason = 1
	// RefusedBadHeader: the PROXY header did not verify (HMAC, window,
	// nonce), named no device, or carried a bad ACL or an expired token.
	RefusedBadHeader Reason = 2
	// RefusedShuttingDown: the node is draining its connections to stop.
	RefusedShuttingDown Reason = 3
	// RefusedOverCapacity: the node has too many handoffs under way.
	RefusedOverCapacity Reason = 4
	// RefusedBadDescriptor: no descriptor, more than one, a truncated
	// control message, or one that is not a TCP socket.
	RefusedBadDescriptor Reason = 5
	// RefusedUnavailable: the tenant could not be opened here now.
	RefusedUnavailable Reason = 6
	// RefusedDuplicateID: the node serves a connection with this id.
	RefusedDuplicateID Reason = 7
)

var reasonNames = [...]string{"", "not-leader", "bad-header", "shutting-down", "over-capacity", "bad-descriptor", "unavailable", "duplicate-id"}

func (r Reason) String() string {
	if int(r) < len(reasonNames) && r != 0 {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason-%d", byte(r))
}

// Errors of the framing and of the bodies.
var (
	ErrFrameSize = errors.New("handoff: frame length out of bounds")
	ErrShort     = errors.New("handoff: truncated frame")
	ErrMalformed = errors.New("handoff: malformed frame body")
)

// Live is a handed-off connection a node still serves, as its hello
// lists it (ID, Tenant) and the credentials frame after it (ID,
// Credential).
type Live struct {
	ID         uint64
	Tenant     string
	Credential string // the device's credential id; empty if unknown
}

// MaxCredential bounds a credential id in a credentials frame (its length
// is one byte).
const MaxCredential = 0xFF

// appendPrefix starts a frame of type t; finish writes its length.
func appendPrefix(b []byte, t byte) ([]byte, int) {
	return append(b, 0, 0, 0, 0, t), len(b)
}

func finish(b []byte, start int) []byte {
	binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start-4))
	return b
}

// Split takes one whole frame off the front of b: its type, its body and
// what follows it. ErrShort means b holds less than one frame (yet).
func Split(b []byte) (typ byte, body, rest []byte, err error) {
	if len(b) < 4 {
		return 0, nil, b, ErrShort
	}
	n, err := frameLen(b)
	if err != nil {
		return 0, nil, b, err
	}
	if len(b) < 4+n {
		return 0, nil, b, ErrShort
	}
	return b[4], b[prefixLen : 4+n], b[4+n:], nil
}

// frameLen checks the length field at the front of b (4 bytes).
func frameLen(b []byte) (int, error) {
	n := binary.BigEndian.Uint32(b)
	if n < 1 || n > MaxFrame {
		return 0, fmt.Errorf("%w: %d", ErrFrameSize, n)
	}
	return int(n), nil
}

// AppendID appends a frame whose body is a handoff id alone: taken,
// closed or close.
func AppendID(b []byte, t byte, id uint64) []byte {
	b, s := appendPrefix(b, t)
	return finish(binary.BigEndian.AppendUint64(b, id), s)
}

// ParseID reads the body of taken, closed or close.
func ParseID(body []byte) (uint64, error) {
	if len(body) != 8 {
		return 0, ErrMalformed
	}
	return binary.BigEndian.Uint64(body), nil
}

// AppendRefused appends a refused frame.
func AppendRefused(b []byte, id uint64, r Reason) []byte {
	b, s := appendPrefix(b, TypeRefused)
	b = binary.BigEndian.AppendUint64(b, id)
	return finish(append(b, byte(r)), s)
}

// ParseRefused reads a refused frame's body.
func ParseRefused(body []byte) (uint64, Reason, error) {
	if len(body) != 9 {
		return 0, 0, ErrMalformed
	}
	return binary.BigEndian.Uint64(body), Reason(body[8]), nil
}

// AppendHandoff appends a handoff frame (without its descriptor, which
// goes with the frame's sendmsg: Conn.Handoff). The header must leave
// the frame within MaxFrame.
func AppendHandoff(b []byte, id uint64, header []byte) ([]byte, error) {
	if 1+8+len(header) > MaxFrame {
		return b, ErrFrameSize
	}
	b, s := appendPrefix(b, TypeHandoff)
	b = binary.BigEndian.AppendUint64(b, id)
	return finish(append(b, header...), s), nil
}

// ParseHandoff reads a handoff frame's body; header aliases body.
func ParseHandoff(body []byte) (id uint64, header []byte, err error) {
	if len(body) < 8 {
		return 0, nil, ErrMalformed
	}
	return binary.BigEndian.Uint64(body), body[8:], nil
}

// AppendHellos appends the hello frames that list live: as many as
// MaxFrame needs, at least one. The node id must be at most 255 bytes and
// each tenant id at most 65,535.
func AppendHellos(b []byte, nodeID string, live []Live) ([]byte, error) {
	if len(nodeID) > 0xFF {
		return b, fmt.Errorf("%w: node id of %d bytes", ErrMalformed, len(nodeID))
	}
	for {
		f, s := appendPrefix(b, TypeHello)
		flags := len(f)
		f = append(f, 0, byte(len(nodeID)))
		f = append(f, nodeID...)
		for len(live) > 0 {
			l := live[0]
			if len(l.Tenant) > 0xFFFF {
				return b, fmt.Errorf("%w: tenant id of %d bytes", ErrMalformed, len(l.Tenant))
			}
			if len(f)-s-4+10+len(l.Tenant) > MaxFrame {
				if len(f) == flags+2+len(nodeID) { // alone in a frame, it would not fit
					return b, fmt.Errorf("%w: tenant id of %d bytes", ErrFrameSize, len(l.Tenant))
				}
				break
			}
			f = binary.BigEndian.AppendUint64(f, l.ID)
			f = binary.BigEndian.AppendUint16(f, uint16(len(l.Tenant)))
			f = append(f, l.Tenant...)
			live = live[1:]
		}
		if len(live) > 0 {
			f[flags] = 1
		}
		b = finish(f, s)
		if len(live) == 0 {
			return b, nil
		}
	}
}

// ParseHello reads one hello frame's body, appending its entries to live.
func ParseHello(body []byte, live []Live) (nodeID string, more bool, _ []Live, err error) {
	if len(body) < 2 || body[0]&^1 != 0 || len(body) < 2+int(body[1]) {
		return "", false, live, ErrMalformed
	}
	more = body[0]&1 != 0
	nodeID = string(body[2 : 2+int(body[1])])
	for b := body[2+int(body[1]):]; len(b) > 0; {
		if len(b) < 10 {
			return "", false, live, ErrMalformed
		}
		n := int(binary.BigEndian.Uint16(b[8:]))
		if len(b) < 10+n {
			return "", false, live, ErrMalformed
		}
		live = append(live, Live{ID: binary.BigEndian.Uint64(b), Tenant: string(b[10 : 10+n])})
		b = b[10+n:]
	}
	return nodeID, more, live, nil
}

// AppendCredentials appends the credentials frames that name the
// credential of each of live (its ID and Credential; Tenant is not
// sent): as many as MaxFrame needs, none for an empty live. A credential
// id must be at most MaxCredential bytes.
//
// A node sends them right after its hello frames, for the connections
// those list: a gateway that adopts them keeps watching their credentials
// for revocation. An older gateway skips the type (unknown types are
// skipped); from an older node none come, and the adopted devices have
// no credential at the gateway.
func AppendCredentials(b []byte, live []Live) ([]byte, error) {
	for _, l := range live {
		if len(l.Credential) > MaxCredential {
			return b, fmt.Errorf("%w: credential id of %d bytes", ErrMalformed, len(l.Credential))
		}
	}
	for len(live) > 0 {
		f, s := appendPrefix(b, TypeCredentials)
		for len(live) > 0 && len(f)-s-4+9+len(live[0].Credential) <= MaxFrame {
			l := live[0]
			f = binary.BigEndian.AppendUint64(f, l.ID)
			f = append(f, byte(len(l.Credential)))
			f = append(f, l.Credential...)
			live = live[1:]
		}
		b = finish(f, s)
	}
	return b, nil
}

// ParseCredentials reads one credentials frame's body, appending its
// entries (ID and Credential) to live.
func ParseCredentials(body []byte, live []Live) ([]Live, error) {
	for b := body; len(b) > 0; {
		if len(b) < 9 || len(b) < 9+int(b[8]) {
			return live, ErrMalformed
		}
		n := int(b[8])
		live = append(live, Live{ID: binary.BigEndian.Uint64(b), Credential: string(b[9 : 9+n])})
		b = b[9+n:]
	}
	return live, nil
}
