package poller

// wheelSlots is the wheel's size in one-second slots: a key filed further
// ahead than that comes round early, and its Waker files it again.
const wheelSlots = 64

// wheel files keys by the Unix second they are due at, in one-second
// slots (a hashed timing wheel: slot = second mod wheelSlots). A slot
// holds keys only, 8 bytes each: a key comes round at its slot's next
// second, whichever revolution that is, and the Waker checks its own
// deadline (Waker.Due). Guarded by Poller.tmu.
type wheel struct {
	slots [wheelSlots][]uint64
	spare []uint64 // a drained slot's storage, for the next one
	n     int      // keys filed
	last  int64    // the last second whose slot was drained
}

// add files key under second sec; a second already drained goes to the
// next one. It reports whether the wheel was empty.
func (w *wheel) add(key uint64, sec int64, now int64) (wasEmpty bool) {
	if w.n == 0 {
		w.last = now // nothing is behind: the next tick drains now+1
	}
	if sec <= w.last {
		sec = w.last + 1
	}
	i := sec % wheelSlots
	w.slots[i] = append(w.slots[i], key)
	w.n++
	return w.n == 1
}

// due drains the slots of the seconds after the last drained one up to
// now (at most one revolution), appending their keys to into.
func (w *wheel) due(now int64, into []uint64) []uint64 {
	if w.n == 0 {
		w.last = now
		return into
	}
	for s, k := w.last+1, 0; s <= now && k < wheelSlots; s, k = s+1, k+1 {
		i := s % wheelSlots
		if len(w.slots[i]) == 0 {
			continue
		}
		into = append(into, w.slots[i]...)
		w.n -= len(w.slots[i])
		clear(w.slots[i])
		w.slots[i], w.spare = w.spare[:0], w.slots[i][:0]
	}
	w.last = now
	return into
}

// next is the second of the next tick (when n > 0).
func (w *wheel) next() int64 { return w.last + 1 }
