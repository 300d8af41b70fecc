package proxyproto

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"net/netip"
	"time"
)

// Berth TLV types (docs/contracts.md). The values never change.
const (
	TLVTenantID     byte = 0xE0
	TLVCredentialID byte = 0xE1
	TLVACL          byte = 0xE2
	TLVTokenExpiry  byte = 0xE3
	TLVIssuedAt     byte = 0xE4
	TLVNonce        byte = 0xE5
	TLVSignature    byte = 0xEF

	// SignatureLen is the size of the HMAC-SHA256 value of TLVSignature.
	SignatureLen = sha256.Size
	// NonceLen is the size of the TLVNonce value.
	NonceLen = 16
	// MinSecretLen is the shortest shared secret NewSigner and NewVerifier accept.
	MinSecretLen = 16
	// DefaultWindow is how old a header may be before a node refuses it.
	DefaultWindow = 30 * time.Second
)

// Verification errors. Each one means the node must close the connection
// before reading any MQTT byte.
var (
	ErrSecret       = fmt.Errorf("proxyproto: shared secret shorter than %d bytes", MinSecretLen)
	ErrUnsigned     = errors.New("proxyproto: header is not signed (no 32-byte 0xEF TLV last)")
	ErrBadSignature = errors.New("proxyproto: signature mismatch")
	ErrMissingTLV   = errors.New("proxyproto: a required Berth TLV is missing or duplicated")
	ErrLocal        = errors.New("proxyproto: LOCAL command where a relayed connection was expected")
	ErrExpired      = errors.New("proxyproto: header older than the replay window")
	ErrFuture       = errors.New("proxyproto: header issued in the future beyond the allowed skew")
	ErrReplay       = errors.New("proxyproto: nonce seen before within the replay window")
	ErrCacheFull    = errors.New("proxyproto: replay cache full")
)

// Info is what the gateway tells the node about a connection.
type Info struct {
	TenantID     string
	CredentialID string
	ACL          []byte // JSON of the token's acl claim
	TokenExpiry  int64  // Unix seconds; 0 means the token does not expire
	IssuedAt     time.Time
	Nonce        [NonceLen]byte
}

// zeroSignature stands in for the signature value while it is computed.
// Read-only.
var zeroSignature [SignatureLen]byte

// macPool is a bounded free list of HMAC-SHA256 states keyed by one
// secret, so signing and verifying allocate nothing per header. (A
// sync.Pool would too, but may drop its states at any GC.)
type macPool struct {
	key  []byte
	free chan hash.Hash
}

func newMACPool(secret []byte) *macPool {
	return &macPool{key: append([]byte(nil), secret...), free: make(chan hash.Hash, 64)}
}

func (m *macPool) get() hash.Hash {
	select {
	case h := <-m.free:
		h.Reset()
		return h
	default:
		return hmac.New(sha256.New, m.key)
	}
}

func (m *macPool) put(h hash.Hash) {
	select {
	case m.free <- h:
	default:
	}
}

// sum computes the header MAC: raw with the 32 bytes at off zeroed.
func (m *macPool) sum(dst, raw []byte, off int) []byte {
	h := m.get()
	h.Write(raw[:off])
	h.Write(zeroSignature[:])
	h.Write(raw[off+SignatureLen:])
	dst = h.Sum(dst)
	m.put(h)
	return dst
}

// Signer writes signed headers. It is safe for concurrent use.
type Signer struct {
	mac *macPool
	now func() time.Time
}

// NewSigner returns a Signer keyed by secret. now is the clock (time.Now
// when nil).
func NewSigner(secret []byte, now func() time.Time) (*Signer, error) {
	if len(secret) < MinSecretLen {
		return nil, ErrSecret
	}
	if now == nil {
		now = time.Now
	}
	return &Signer{mac: newMACPool(secret), now: now}, nil
}

// Append encodes a PROXY header for a relayed TCP connection from src to
// dst carrying the Berth TLVs of info, signs it and appends it to buf. The
// issued-at time and a fresh random nonce are chosen here (info's own
// IssuedAt and Nonce are ignored). It allocates nothing when buf has room.
func (s *Signer) Append(buf []byte, src, dst netip.AddrPort, info *Info) ([]byte, error) {
	h := Header{Command: CommandProxy, Source: src, Dest: dst}
	start := len(buf)
	buf, err := h.Append(buf)
	if err != nil {
		return buf[:start], err
	}
	buf = appendTLVString(buf, TLVTenantID, info.TenantID)
	buf = appendTLVString(buf, TLVCredentialID, info.CredentialID)
	buf = appendTLVHeader(buf, TLVACL, len(info.ACL))
	buf = append(buf, info.ACL...)
	buf = appendTLVHeader(buf, TLVTokenExpiry, 8)
	buf = binary.BigEndian.AppendUint64(buf, uint64(info.TokenExpiry))
	buf = appendTLVHeader(buf, TLVIssuedAt, 8)
	buf = binary.BigEndian.AppendUint64(buf, uint64(s.now().UnixNano()))
	buf = appendTLVHeader(buf, TLVNonce, NonceLen)
	buf = append(buf, make([]byte, NonceLen)...)
	_, _ = rand.Read(buf[len(buf)-NonceLen:]) // crypto/rand.Read never fails on supported platforms
	buf = appendTLVHeader(buf, TLVSignature, SignatureLen)
	sigOff := len(buf) - start
	buf = append(buf, make([]byte, SignatureLen)...)
	raw := buf[start:]
	if len(raw) > MaxLen || len(info.ACL) > 0xFFFF || len(info.TenantID) > 0xFFFF || len(info.CredentialID) > 0xFFFF {
		return buf[:start], ErrTooLarge
	}
	binary.BigEndian.PutUint16(raw[14:16], uint16(len(raw)-FixedLen))
	s.mac.sum(raw[sigOff:sigOff], raw, sigOff)
	return buf, nil
}

func appendTLVHeader(b []byte, t byte, n int) []byte {
	return append(b, t, byte(n>>8), byte(n))
}

func appendTLVString(b []byte, t byte, v string) []byte {
	return append(appendTLVHeader(b, t, len(v)), v...)
}

// VerifierOptions tunes a Verifier; zero values take the defaults.
type VerifierOptions struct {
	Window        time.Duration    // oldest header accepted; DefaultWindow
	MaxSkew       time.Duration    // how far in the future issued-at may be; 2 s
	NonceCapacity int              // nonces remembered at most; 1<<20
	Now           func() time.Time // clock; time.Now
	// Previous is a second secret also accepted, during a rotation of the
	// shared secret (docs/operations.md): headers signed with either the
	// current or the previous secret verify. Empty accepts only the current.
	Previous []byte
}

// Verifier checks signed headers and refuses replays. It is safe for
// concurrent use; one Verifier (one nonce cache) serves a whole node.
type Verifier struct {
	mac    *macPool
	prev   *macPool // nil without VerifierOptions.Previous
	window time.Duration
	skew   time.Duration
	now    func() time.Time
	nonces *nonceCache
}

// NewVerifier returns a Verifier keyed by secret (and opt.Previous).
func NewVerifier(secret []byte, opt VerifierOptions) (*Verifier, error) {
	if len(secret) < MinSecretLen || (len(opt.Previous) > 0 && len(opt.Previous) < MinSecretLen) {
		return nil, ErrSecret
	}
	var prev *macPool
	if len(opt.Previous) > 0 {
		prev = newMACPool(opt.Previous)
	}
	if opt.Window <= 0 {
		opt.Window = DefaultWindow
	}
	if opt.MaxSkew <= 0 {
		opt.MaxSkew = 2 * time.Second
	}
	if opt.NonceCapacity <= 0 {
		opt.NonceCapacity = 1 << 20
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	return &Verifier{
		mac:    newMACPool(secret),
		prev:   prev,
		window: opt.Window,
		skew:   opt.MaxSkew,
		now:    opt.Now,
		nonces: newNonceCache(opt.NonceCapacity),
	}, nil
}

// Verify parses raw (exactly one header, as ReadHeader returns it) into h,
// checks its signature, age and nonce, and fills info. The nonce is
// recorded only when everything else holds.
func (v *Verifier) Verify(raw []byte, h *Header, info *Info) error {
	if err := h.Parse(raw); err != nil {
		return err
	}
	if h.Command != CommandProxy {
		return ErrLocal
	}
	if len(h.TLVs) == 0 {
		return ErrUnsigned
	}
	last := h.TLVs[len(h.TLVs)-1]
	if last.Type != TLVSignature || len(last.Value) != SignatureLen {
		return ErrUnsigned
	}
	sigOff := len(raw) - SignatureLen // the signature is last, so its value ends the header
	var want [SignatureLen]byte
	if !hmac.Equal(v.mac.sum(want[:0], raw, sigOff), last.Value) &&
		(v.prev == nil || !hmac.Equal(v.prev.sum(want[:0], raw, sigOff), last.Value)) {
		return ErrBadSignature
	}
	var seen [6]bool
	for _, t := range h.TLVs[:len(h.TLVs)-1] {
		if t.Type < TLVTenantID || t.Type > TLVNonce {
			if t.Type == TLVSignature {
				return ErrMissingTLV // a second signature TLV
			}
			continue // other TLVs (0x01 ALPN, ...) are allowed and ignored
		}
		i := t.Type - TLVTenantID
		if seen[i] {
			return ErrMissingTLV
		}
		seen[i] = true
		switch t.Type {
		case TLVTenantID:
			info.TenantID = string(t.Value)
		case TLVCredentialID:
			info.CredentialID = string(t.Value)
		case TLVACL:
			info.ACL = append(info.ACL[:0], t.Value...)
		case TLVTokenExpiry, TLVIssuedAt:
			if len(t.Value) != 8 {
				return fmt.Errorf("%w: TLV 0x%02X is not 8 bytes", ErrMalformed, t.Type)
			}
			n := int64(binary.BigEndian.Uint64(t.Value))
			if t.Type == TLVTokenExpiry {
				info.TokenExpiry = n
			} else {
				info.IssuedAt = time.Unix(0, n)
			}
		case TLVNonce:
			if len(t.Value) != NonceLen {
				return fmt.Errorf("%w: nonce is not %d bytes", ErrMalformed, NonceLen)
			}
			info.Nonce = [NonceLen]byte(t.Value)
		}
	}
	for _, ok := range seen {
		if !ok {
			return ErrMissingTLV
		}
	}
	now := v.now()
	age := now.Sub(info.IssuedAt)
	switch {
	case age > v.window:
		return ErrExpired
	case age < -v.skew:
		return ErrFuture
	}
	// Keep the nonce until no header carrying it could still be accepted.
	return v.nonces.add(info.Nonce, now, info.IssuedAt.Add(v.window))
}
