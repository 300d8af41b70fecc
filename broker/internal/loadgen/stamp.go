package loadgen

import (
	"encoding/binary"
	"sync"

	"berth.dev/broker/internal/histogram"
)

// stampSize is the length of the payload stamp drawn in doc.go. Never
// change it: results and peers rely on the layout.
const stampSize = 16

// putStamp writes the stamp at the start of p (len(p) >= stampSize).
func putStamp(p []byte, pub, seq uint32, nanos int64) {
	binary.BigEndian.PutUint32(p[0:4], pub)
	binary.BigEndian.PutUint32(p[4:8], seq)
	binary.BigEndian.PutUint64(p[8:16], uint64(nanos))
}

// readStamp parses the stamp; ok is false when p is too short.
func readStamp(p []byte) (pub, seq uint32, nanos int64, ok bool) {
	if len(p) < stampSize {
		return 0, 0, 0, false
	}
	return binary.BigEndian.Uint32(p[0:4]), binary.BigEndian.Uint32(p[4:8]),
		int64(binary.BigEndian.Uint64(p[8:16])), true
}

// seqSet records which sequence numbers of one publisher arrived.
type seqSet struct {
	bits   []uint64
	unique uint64
	dups   uint64
}

// add marks seq and reports whether it was new.
func (s *seqSet) add(seq uint32) bool {
	w := int(seq >> 6)
	if w >= len(s.bits) {
		n := max(2*len(s.bits), w+1, 16)
		nb := make([]uint64, n)
		copy(nb, s.bits)
		s.bits = nb
	}
	m := uint64(1) << (seq & 63)
	if s.bits[w]&m != 0 {
		s.dups++
		return false
	}
	s.bits[w] |= m
	s.unique++
	return true
}

// recorder is a latency histogram shared between the goroutine that
// records and the progress reporter, which takes the last interval's
// values with takeWindow.
type recorder struct {
	mu     sync.Mutex
	total  *histogram.Histogram
	window *histogram.Histogram
}

func newRecorder() *recorder {
	return &recorder{total: histogram.New(), window: histogram.New()}
}

func (r *recorder) record(ns int64) {
	r.mu.Lock()
	r.total.Record(ns)
	r.window.Record(ns)
	r.mu.Unlock()
}

// takeWindow merges the values recorded since the last call into into and
// empties the window.
func (r *recorder) takeWindow(into *histogram.Histogram) {
	r.mu.Lock()
	into.Merge(r.window)
	r.window.Reset()
	r.mu.Unlock()
}

// mergeTotal merges every value recorded into into.
func (r *recorder) mergeTotal(into *histogram.Histogram) {
	r.mu.Lock()
	into.Merge(r.total)
	r.mu.Unlock()
}
