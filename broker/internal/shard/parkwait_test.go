package shard

import (
	"net"
	"testing"

	"berth.dev/broker/packet"
)

// TestParkDoesNotWaitForTheWriter: a reader going to park does not wait
// for the connection's write lock, which a writer holds across a write
// that blocks on a client that does not read (up to WriteTimeout): it
// parks, with its socket, and keeps reading meanwhile. Here the test
// holds the lock, as that writer would, while a PINGREQ wakes the reader.
func TestParkDoesNotWaitForTheWriter(t *testing.T) {
	pr := new(probe)
	sh := New(Options{SysInterval: -1, Poller: newTestPoller(t), probe: pr})
	// wrapped: a socket the connection cannot park without (detach.go),
	// so that it parks attached and its wake-up takes no lock.
	addr := serveWrapped(t, sh, ConnInfo{AllowAnonymous: true}, func(c net.Conn) net.Conn { return wrapped{c} })
	b := &testBroker{shard: sh, addr: addr}
	c := dialRaw(t, addr, packet.Version5)
	c.connectOK("held")
	waitParked(t, b, "held")
	var cn *conn
	sh.mu.RLock()
	for x := range sh.conns {
		if x.clientID == "held" {
			cn = x
		}
	}
	sh.mu.RUnlock()
	writers := pr.writers.Load()
	cn.w.mu.Lock()
	locked := true
	defer func() {
		if locked {
			cn.w.mu.Unlock()
		}
	}()
	c.send(&packet.Ping{Type: packet.TypePingreq})
	// The PINGREQ handled: its PINGRESP, not written inline (the lock is
	// held), went to a writer goroutine, which waits for the lock.
	eventually(t, "a writer started for the PINGRESP", func() bool { return pr.writers.Load() > writers })
	eventually(t, "the reader parked again, the write lock held", func() bool { return b.parked("held") })
	cn.w.mu.Unlock()
	locked = false
	c.read(packet.TypePingresp)
	waitParked(t, b, "held")
	ping(c) // and it is woken as before
}
