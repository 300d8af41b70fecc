package shard

import (
	"sync/atomic"
	"time"
)

// probe counts, for tests, what woken connections take at once
// (Options.probe): the pooled 4 KiB read buffers held, the resumed
// readers running and the writer goroutines started. It is nil outside
// tests, and its methods do nothing on nil, so a shard pays one
// predictable branch per buffer or goroutine, never per message.
type probe struct {
	readBufs, readBufsPeak atomic.Int64
	readers, readersPeak   atomic.Int64
	writers                atomic.Int64 // started, in all
	waits                  atomic.Int64 // parkAfter waits on a reader's goroutine (idle), in all
	// handshakes running on the workers (handshakes.go)
	handshakes, handshakesPeak atomic.Int64
	// readers in their parkAfterConnect wait (idle); connectWaitsAll
	// counts those waits, in all
	connectWaits, connectWaitsPeak, connectWaitsAll atomic.Int64
	parkedNows                                      atomic.Int64 // readers parked on a handshake worker (parkNow), in all
}

// wait counts a wait of d for input on a reader's goroutine before it
// parks (idle) when it is a whole parkAfter: the shorter ones
// (parkAfterConnect, none) are not counted.
func (p *probe) wait(d time.Duration) {
	if p != nil && d >= parkAfter {
		p.waits.Add(1)
	}
}

// readBuf counts a pooled read buffer taken (+1) or given back (-1).
func (p *probe) readBuf(delta int64) {
	if p != nil {
		raise(&p.readBufsPeak, p.readBufs.Add(delta))
	}
}

// reader counts a resumed reader starting (+1) or ending (-1).
func (p *probe) reader(delta int64) {
	if p != nil {
		raise(&p.readersPeak, p.readers.Add(delta))
	}
}

// writer counts a writer goroutine started.
func (p *probe) writer() {
	if p != nil {
		p.writers.Add(1)
	}
}

// raise makes peak at least v.
func raise(peak *atomic.Int64, v int64) {
	for {
		old := peak.Load()
		if v <= old || peak.CompareAndSwap(old, v) {
			return
		}
	}
}

// handshake counts a worker's handshake starting (+1) or ending (-1).
func (p *probe) handshake(delta int64) {
	if p != nil {
		raise(&p.handshakesPeak, p.handshakes.Add(delta))
	}
}

// connectWait counts a reader's parkAfterConnect wait starting (+1) or
// ending (-1).
func (p *probe) connectWait(delta int64) {
	if p != nil {
		if delta > 0 {
			p.connectWaitsAll.Add(1)
		}
		raise(&p.connectWaitsPeak, p.connectWaits.Add(delta))
	}
}

// parkedNow counts a reader parked on a handshake worker (parkNow).
func (p *probe) parkedNow() {
	if p != nil {
		p.parkedNows.Add(1)
	}
}
