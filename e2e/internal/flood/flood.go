// Package flood is a TCP connect flood for the fault suite: paced
// attempts, each a TCP connect from one of a set of source addresses, an
// MQTT 5 CONNECT whose password looks like a JWT, and a read of the
// answer, counted by outcome. cmd/connflood runs it as a process of its
// own, so that its cost stays out of what it measures.
package flood

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Stats counts a flood's attempts by outcome.
type Stats struct {
	Attempts  atomic.Int64 // connects tried
	Dropped   atomic.Int64 // connect timed out: the SYN went unanswered (dropped in the gateway's kernel)
	DialErr   atomic.Int64 // connect failed otherwise
	Refused   atomic.Int64 // reset (or closed) without a byte back, at the dial or the read: refused at accept
	Connacked atomic.Int64 // got an answer: reached authentication
}

// Config is one flood.
type Config struct {
	Addr    string         // the target, host:port
	Sources []*net.TCPAddr // local addresses, used in turn
	Rate    int            // attempts a second
	For     time.Duration  // how long
	Workers int            // attempts at once at most
	// DialTimeout bounds a connect: one whose SYN is not answered within
	// it counts as dropped. Under the kernel's 1 s SYN retransmission, so
	// a dropped attempt is one SYN; short, so that workers waiting on
	// dropped SYNs do not slow the flood.
	DialTimeout time.Duration
}

// Run floods until cfg.For has passed or ctx ends, and returns how long it
// took. Attempts are paced by a ticker; one no worker can take at once is
// skipped, not queued, so the flood ends on time.
func Run(ctx context.Context, cfg Config, st *Stats) time.Duration {
	connect := Connect()
	tokens := make(chan int, cfg.Workers)
	var wg sync.WaitGroup
	for range cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range tokens {
				attempt(cfg.Addr, cfg.Sources[n%len(cfg.Sources)], cfg.DialTimeout, connect, st)
			}
		}()
	}
	start := time.Now()
	const tick = 10 * time.Millisecond
	perTick := cfg.Rate * int(tick) / int(time.Second)
	ticker := time.NewTicker(tick)
	n := 0
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case now := <-ticker.C:
			if now.Sub(start) >= cfg.For {
				break loop
			}
			for range perTick {
				select {
				case tokens <- n:
					n++
				default:
				}
			}
		}
	}
	ticker.Stop()
	close(tokens)
	wg.Wait()
	return time.Since(start)
}

// attempt connects from src, sends connect and reads the answer.
func attempt(addr string, src *net.TCPAddr, timeout time.Duration, connect []byte, st *Stats) {
	st.Attempts.Add(1)
	d := net.Dialer{LocalAddr: src, Timeout: timeout}
	nc, err := d.Dial("tcp", addr)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		st.Dropped.Add(1)
		return
	}
	if errors.Is(err, syscall.ECONNRESET) {
		// The gateway resets a connection it refuses at accept; the RST can
		// land before the dialer's check of the finished handshake.
		st.Refused.Add(1)
		return
	}
	if err != nil {
		st.DialErr.Add(1)
		return
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(2 * time.Second))
	_, _ = nc.Write(connect) // a refused connection may already be closed
	var b [1]byte
	if n, _ := io.ReadFull(nc, b[:]); n == 1 {
		st.Connacked.Add(1)
	} else {
		st.Refused.Add(1)
	}
}

// Connect encodes an MQTT 5 CONNECT (clean start, user name and a
// password shaped like a JWT) by hand: the flood does not need a client.
func Connect() []byte {
	str := func(b []byte, s string) []byte {
		b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
		return append(b, s...)
	}
	var v []byte
	v = str(v, "MQTT")
	v = append(v, 5, 0xC2, 0, 30, 0) // level 5; user name, password, clean start; keep alive 30; no properties
	v = str(v, "flood")
	v = str(v, "flood-user")
	v = str(v, "eyJhbGciOiJFZERTQSIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJmbG9vZCJ9.c2lnbmF0dXJl")
	out := []byte{0x10}
	for n := len(v); ; {
		d := byte(n % 128)
		n /= 128
		if n > 0 {
			d |= 0x80
		}
		out = append(out, d)
		if n == 0 {
			break
		}
	}
	return append(out, v...)
}
