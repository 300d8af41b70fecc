package shard

import (
	"fmt"
	"net"
	"testing"

	"berth.dev/broker/packet"
)

// TestMassWakeUp: many parked connections woken at once, as a fleet that
// pings together or a load tool that closes every connection, take no
// 4 KiB read buffer and start no writer goroutine: a close is seen by a
// peek that needs no buffer and torn down on the woken reader's own
// goroutine, and a PINGREQ (like any few small packets) is read into the
// small buffer in the reader's scratch (docs/idle-connections.md, "The
// mass wake-up"). Counts, not times: the shard's probe counts the pooled
// read buffers held at once and the writers started.
func TestMassWakeUp(t *testing.T) {
	t.Parallel()
	pr := new(probe)
	b := startBroker(t, Options{probe: pr}, ConnInfo{})
	const n = 300
	clients := connectMany(t, b, "mass", n)
	for i := range clients {
		waitParked(t, b, fmt.Sprintf("mass-%d", i))
	}
	// measure resets the peaks to what is held now, runs phase and
	// reports what it added at its peak.
	measure := func(phase func()) (readBufs, readers, writers int64) {
		baseBufs, baseWriters := pr.readBufs.Load(), pr.writers.Load()
		pr.readBufsPeak.Store(baseBufs)
		pr.readersPeak.Store(pr.readers.Load())
		phase()
		return pr.readBufsPeak.Load() - baseBufs, pr.readersPeak.Load(), pr.writers.Load() - baseWriters
	}

	bufs, readers, writers := measure(func() {
		ping := []byte{0xC0, 0} // PINGREQ, the same in 3.1.1 and 5.0
		for _, c := range clients {
			c.sendBytes(ping)
		}
		for _, c := range clients {
			c.read(packet.TypePingresp)
		}
	})
	t.Logf("%d parked connections pinged at once: %d read buffers, %d resumed readers at the peak, %d writers started",
		n, bufs, readers, writers)
	if bufs != 0 || writers != 0 {
		t.Errorf("pings took %d read buffers and started %d writers at once, want none", bufs, writers)
	}
	for i := range clients {
		waitParked(t, b, fmt.Sprintf("mass-%d", i))
	}

	bufs, readers, writers = measure(func() {
		for i, c := range clients {
			switch i % 3 {
			case 0: // DISCONNECT, then close
				c.sendBytes([]byte{0xE0, 0})
			case 1: // reset: nothing left unread, linger 0
				_ = c.nc.(*net.TCPConn).SetLinger(0)
			}
			_ = c.nc.Close()
		}
		eventually(t, "every connection torn down", func() bool {
			b.shard.mu.RLock()
			defer b.shard.mu.RUnlock()
			return len(b.shard.conns) == 0
		})
	})
	t.Logf("%d parked connections closed at once by their peers: %d read buffers, %d resumed readers at the peak, %d writers started",
		n, bufs, readers, writers)
	if bufs != 0 || writers != 0 {
		t.Errorf("closes took %d read buffers and started %d writers at once, want none", bufs, writers)
	}
	if got := b.shard.stats.connected.Load(); got != 0 {
		t.Errorf("%d connections still counted connected", got)
	}
}

// connectMany connects n clean clients named prefix-0 … prefix-(n-1),
// 3.1.1 and 5.0 in turn.
func connectMany(t *testing.T, b *testBroker, prefix string, n int) []*rawClient {
	t.Helper()
	clients := make([]*rawClient, n)
	for i := range clients {
		version := packet.Version311
		if i%2 == 1 {
			version = packet.Version5
		}
		clients[i] = dialRaw(t, b.addr, version)
		clients[i].connectOK(fmt.Sprintf("%s-%d", prefix, i))
	}
	return clients
}
