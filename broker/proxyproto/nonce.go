package proxyproto

import (
	"sync"
	"time"
)

// nonceCache remembers nonces until they expire, in a map plus a FIFO ring
// ordered by insertion. Expired entries are dropped from the front of the
// ring on every add; entries are kept at least until their own expiry, so a
// ring entry whose expiry is later than the one in front of it just waits a
// little longer. Capacity bounds both.
type nonceCache struct {
	mu   sync.Mutex
	seen map[[NonceLen]byte]int64 // nonce -> expiry (Unix nanoseconds)
	ring []nonceEntry
	head int // index of the oldest entry
	n    int // entries in the ring
}

type nonceEntry struct {
	nonce  [NonceLen]byte
	expiry int64
}

func newNonceCache(capacity int) *nonceCache {
	return &nonceCache{seen: make(map[[NonceLen]byte]int64), ring: make([]nonceEntry, capacity)}
}

// add records nonce, valid until expiry. It fails with ErrReplay when the
// nonce is known and with ErrCacheFull when no slot is free.
func (c *nonceCache) add(nonce [NonceLen]byte, now, expiry time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	nowN := now.UnixNano()
	for c.n > 0 {
		e := &c.ring[c.head]
		if c.seen[e.nonce] > nowN {
			break // the oldest insertion is still live
		}
		delete(c.seen, e.nonce)
		c.head = (c.head + 1) % len(c.ring)
		c.n--
	}
	if exp, ok := c.seen[nonce]; ok && exp > nowN {
		return ErrReplay
	}
	if c.n == len(c.ring) {
		return ErrCacheFull
	}
	exp := max(expiry.UnixNano(), c.seen[nonce])
	c.seen[nonce] = exp
	c.ring[(c.head+c.n)%len(c.ring)] = nonceEntry{nonce: nonce, expiry: exp}
	c.n++
	return nil
}

// len returns the number of remembered nonces.
func (c *nonceCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}
