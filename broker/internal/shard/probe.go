package shard

import "sync/atomic"

// probe counts, for tests, what woken connections take at once
// (Options.probe): the pooled 4 KiB read buffers held, the resumed
// readers running and the writer goroutines started. It is nil outside
// tests, and its methods do nothing on nil, so a shard pays one
// predictable branch per buffer or goroutine, never per message.
type probe struct {
	readBufs, readBufsPeak atomic.Int64
	readers, readersPeak   atomic.Int64
	writers                atomic.Int64 // started, in all
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
