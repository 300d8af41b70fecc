package replica

import (
	"bufio"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Handshake and frame constants. NEVER CHANGE these: they are the wire format
// between nodes (doc.go draws it).
const (
	handshakeMagic   = "BRF1"
	nonceSize        = 16
	macSize          = sha256.Size
	helloSize        = 4 + 8 + 8 + nonceSize        // magic, from, to, client nonce
	challengeSize    = 4 + nonceSize + macSize      // magic, server nonce, server proof
	frameHeaderSize  = 4                            // body length
	frameBodyHeader  = 1 + 8                        // kind, group id
	maxFrameBody     = 64 << 20                     // a snapshot fits; larger is refused
	labelClientProof = "berth raft v1 client proof" // HMAC domain separation
	labelServerProof = "berth raft v1 server proof"
	labelSessionKey  = "berth raft v1 session key"
)

// Frame kinds.
const (
	kindRaft    byte = 1 // a raftpb.Message for a group
	kindQuiesce byte = 2 // a MsgHeartbeat telling the follower to quiesce
	kindAlive   byte = 3 // node liveness: one per peer per tick, no group
)

// Sentinel errors of the peer protocol.
var (
	ErrAuth        = errors.New("replica: peer authentication failed")
	ErrFrameMAC    = errors.New("replica: frame MAC mismatch")
	ErrFrameSize   = errors.New("replica: frame too large")
	ErrUnknownPeer = errors.New("replica: unknown peer")
)

// transcript is what both proofs and the session key are computed over: the
// two node ids and both nonces, so a proof is bound to this connection and
// can be replayed neither on another connection nor in the other direction.
func transcript(label string, from, to uint64, cn, sn []byte) []byte {
	b := make([]byte, 0, len(label)+16+2*nonceSize)
	b = append(b, label...)
	b = binary.BigEndian.AppendUint64(b, from)
	b = binary.BigEndian.AppendUint64(b, to)
	b = append(b, cn...)
	return append(b, sn...)
}

func mac(key, msg []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write(msg)
	return h.Sum(nil)
}

// clientHandshake runs the dialer's side: hello, check the server's proof,
// send ours. It returns the session key for the frames the dialer sends.
func clientHandshake(rw io.ReadWriter, secret []byte, from, to uint64) ([]byte, error) {
	cn := make([]byte, nonceSize)
	if _, err := rand.Read(cn); err != nil {
		return nil, err
	}
	hello := make([]byte, 0, helloSize)
	hello = append(hello, handshakeMagic...)
	hello = binary.BigEndian.AppendUint64(hello, from)
	hello = binary.BigEndian.AppendUint64(hello, to)
	hello = append(hello, cn...)
	if _, err := rw.Write(hello); err != nil {
		return nil, fmt.Errorf("replica: handshake: %w", err)
	}
	ch := make([]byte, challengeSize)
	if _, err := io.ReadFull(rw, ch); err != nil {
		return nil, fmt.Errorf("replica: handshake: %w", err)
	}
	if string(ch[:4]) != handshakeMagic {
		return nil, fmt.Errorf("%w: bad magic", ErrAuth)
	}
	sn := ch[4 : 4+nonceSize]
	if !hmac.Equal(ch[4+nonceSize:], mac(secret, transcript(labelServerProof, from, to, cn, sn))) {
		return nil, fmt.Errorf("%w: server proof", ErrAuth)
	}
	if _, err := rw.Write(mac(secret, transcript(labelClientProof, from, to, cn, sn))); err != nil {
		return nil, fmt.Errorf("replica: handshake: %w", err)
	}
	return mac(secret, transcript(labelSessionKey, from, to, cn, sn)), nil
}

// serverHandshake runs the listener's side. known says whether a node id is
// a configured peer. It returns the authenticated peer id and the session key.
func serverHandshake(rw io.ReadWriter, secret []byte, self uint64, known func(uint64) bool) (uint64, []byte, error) {
	hello := make([]byte, helloSize)
	if _, err := io.ReadFull(rw, hello); err != nil {
		return 0, nil, fmt.Errorf("replica: handshake: %w", err)
	}
	if string(hello[:4]) != handshakeMagic {
		return 0, nil, fmt.Errorf("%w: bad magic", ErrAuth)
	}
	from := binary.BigEndian.Uint64(hello[4:12])
	to := binary.BigEndian.Uint64(hello[12:20])
	cn := hello[20:]
	if to != self {
		return 0, nil, fmt.Errorf("%w: addressed to node %d, this is %d", ErrAuth, to, self)
	}
	if !known(from) {
		return 0, nil, fmt.Errorf("%w: node %d", ErrUnknownPeer, from)
	}
	sn := make([]byte, nonceSize)
	if _, err := rand.Read(sn); err != nil {
		return 0, nil, err
	}
	ch := make([]byte, 0, challengeSize)
	ch = append(ch, handshakeMagic...)
	ch = append(ch, sn...)
	ch = append(ch, mac(secret, transcript(labelServerProof, from, to, cn, sn))...)
	if _, err := rw.Write(ch); err != nil {
		return 0, nil, fmt.Errorf("replica: handshake: %w", err)
	}
	proof := make([]byte, macSize)
	if _, err := io.ReadFull(rw, proof); err != nil {
		return 0, nil, fmt.Errorf("replica: handshake: %w", err)
	}
	if !hmac.Equal(proof, mac(secret, transcript(labelClientProof, from, to, cn, sn))) {
		return 0, nil, fmt.Errorf("%w: client proof from node %d", ErrAuth, from)
	}
	return from, mac(secret, transcript(labelSessionKey, from, to, cn, sn)), nil
}

// frameWriter writes MAC'd frames on one connection. Each frame's MAC covers
// a sequence number that both ends count, so a frame cannot be dropped,
// replayed or reordered inside the connection without the reader noticing.
// Frames are built in one buffer (a raft message is marshalled straight
// into it), MAC'd in place, and go out with one write(2) per flush, or as
// soon as the buffer passes frameFlushAt.
type frameWriter struct {
	w   io.Writer
	h   hash.Hash
	seq uint64
	buf []byte
}

const (
	frameFlushAt = 64 << 10 // buffered frames are written once they reach this
	frameBufKeep = 2 << 20  // a buffer one large frame grew past this is not kept (MaxSizePerMsg fits)
)

// marshalMsg marshals raft messages into the frame buffer. Deterministic
// is not needed (the MAC covers the bytes sent, not a re-encoding).
var marshalMsg = proto.MarshalOptions{}

func newFrameWriter(w io.Writer, key []byte) *frameWriter {
	return &frameWriter{w: w, h: hmac.New(sha256.New, key)}
}

// write buffers one frame and returns its size on the wire; flush sends
// what is buffered.
func (fw *frameWriter) write(kind byte, group uint64, payload []byte) (int, error) {
	start := fw.begin(kind, group)
	fw.buf = append(fw.buf, payload...)
	return fw.end(start)
}

// writeMsg buffers one frame whose payload is m, protobuf-encoded; on an
// encoding error nothing is buffered.
func (fw *frameWriter) writeMsg(kind byte, group uint64, m *pb.Message) (int, error) {
	start := fw.begin(kind, group)
	b, err := marshalMsg.MarshalAppend(fw.buf, m)
	if err != nil {
		fw.buf = fw.buf[:start]
		return 0, fmt.Errorf("%w: %v", errMarshal, err)
	}
	fw.buf = b
	return fw.end(start)
}

// errMarshal: a raft message that did not encode (the frame is dropped,
// the connection goes on).
var errMarshal = errors.New("replica: encode raft message")

func (fw *frameWriter) begin(kind byte, group uint64) int {
	start := len(fw.buf)
	fw.buf = append(fw.buf, 0, 0, 0, 0, kind)
	fw.buf = binary.BigEndian.AppendUint64(fw.buf, group)
	return start
}

// end fills in the length of the frame at start and appends its MAC.
func (fw *frameWriter) end(start int) (int, error) {
	n := len(fw.buf) - start - frameHeaderSize
	if n > maxFrameBody {
		fw.buf = fw.buf[:start]
		return 0, ErrFrameSize
	}
	binary.BigEndian.PutUint32(fw.buf[start:], uint32(n))
	var seq [8]byte
	binary.BigEndian.PutUint64(seq[:], fw.seq)
	fw.seq++
	fw.h.Reset()
	fw.h.Write(seq[:])
	fw.h.Write(fw.buf[start:])
	fw.buf = fw.h.Sum(fw.buf)
	size := len(fw.buf) - start
	if len(fw.buf) >= frameFlushAt {
		return size, fw.flush()
	}
	return size, nil
}

// flush writes the buffered frames.
func (fw *frameWriter) flush() error {
	if len(fw.buf) == 0 {
		return nil
	}
	_, err := fw.w.Write(fw.buf)
	if cap(fw.buf) > frameBufKeep {
		fw.buf = nil
	} else {
		fw.buf = fw.buf[:0]
	}
	return err
}

// frameReader reads and verifies frames from one connection.
type frameReader struct {
	r   *bufio.Reader
	h   hash.Hash
	seq uint64
	buf []byte
	sum [macSize]byte
}

func newFrameReader(r io.Reader, key []byte) *frameReader {
	return &frameReader{r: bufio.NewReaderSize(r, 64<<10), h: hmac.New(sha256.New, key)}
}

// read returns the next verified frame; payload is valid until the next call.
func (fr *frameReader) read() (kind byte, group uint64, payload []byte, err error) {
	var hdr [frameHeaderSize + frameBodyHeader]byte
	if _, err := io.ReadFull(fr.r, hdr[:frameHeaderSize]); err != nil {
		return 0, 0, nil, err
	}
	n := int(binary.BigEndian.Uint32(hdr[0:4]))
	if n > maxFrameBody || n < frameBodyHeader {
		return 0, 0, nil, ErrFrameSize
	}
	if _, err := io.ReadFull(fr.r, hdr[frameHeaderSize:]); err != nil {
		return 0, 0, nil, err
	}
	pn := n - frameBodyHeader
	if cap(fr.buf) < pn+macSize {
		fr.buf = make([]byte, pn+macSize)
	}
	b := fr.buf[:pn+macSize]
	if _, err := io.ReadFull(fr.r, b); err != nil {
		return 0, 0, nil, err
	}
	var seq [8]byte
	binary.BigEndian.PutUint64(seq[:], fr.seq)
	fr.seq++
	fr.h.Reset()
	fr.h.Write(seq[:])
	fr.h.Write(hdr[:])
	fr.h.Write(b[:pn])
	if !hmac.Equal(fr.h.Sum(fr.sum[:0]), b[pn:]) {
		return 0, 0, nil, ErrFrameMAC
	}
	return hdr[4], binary.BigEndian.Uint64(hdr[5:13]), b[:pn], nil
}
