package shard

import (
	"cmp"
	"fmt"
	"slices"

	"berth.dev/broker/internal/store"
)

// qos2Rebuild restores the QoS 2 state of persistent sessions from the
// message log after a restart (see qos2.go), and takes the QoS 1
// deliveries they acknowledged out of their rebuilt rings (ackrecord.go). rebuildPending feeds it every
// record from the lowest session position, in log order; a session takes
// only the records at or above its own position (session.q2from), so
// nothing of an earlier session of the same client id comes back. finish
// then turns the outbound flows into inflight deliveries and takes their
// messages out of the stored rings.
type qos2Rebuild struct {
	s     *Shard
	flows map[*session]*outFlows
	// done are the offsets of QoS 1 deliveries each session PUBACKed
	// (StateAcked records, ackrecord.go): not pending any more.
	done map[*session]map[uint64]struct{}
}

// outFlows are one session's outbound QoS 2 flows found in the log.
type outFlows struct {
	byID map[uint16]outFlow
	done map[uint64]bool // log offsets whose flow ended: never resent
	seq  int
}

// outFlow is one outbound QoS 2 flow: its message's log offset (when its
// StateOutSent record was read), whether PUBREC came (then relOff is the
// offset of its StateOutReleased record), and its order.
type outFlow struct {
	off      uint64
	hasOff   bool
	released bool
	relOff   uint64
	seq      int
}

func (s *Shard) newQoS2Rebuild() *qos2Rebuild {
	return &qos2Rebuild{s: s, flows: make(map[*session]*outFlows)}
}

// sessionAt returns the restored session of clientID if the record at
// off belongs to it.
func (rb *qos2Rebuild) sessionAt(clientID []byte, off uint64) *session {
	sess := rb.s.sessions[string(clientID)]
	if sess == nil || sess.expiry == 0 || off < sess.q2from() {
		return nil
	}
	return sess
}

// marker applies the origin of a message record: the inbound QoS 2
// message with packet id id awaits its PUBREL.
func (rb *qos2Rebuild) marker(off uint64, clientID []byte, id uint16) {
	if sess := rb.sessionAt(clientID, off); sess != nil {
		sess.putAwaitingRelLocked(id, off+1)
	}
}

// state applies one QoS 2 state record.
func (rb *qos2Rebuild) state(off uint64, key, payload []byte) {
	kind, clientID, err := store.DecodeStateKey(key)
	var id uint16
	if err == nil && kind != store.StateOutSent && kind != store.StateAcked {
		id, err = store.PacketID(payload)
	}
	if err != nil {
		rb.s.opts.Logger.Warn("skipping undecodable QoS 2 state record", "offset", off, "err", err)
		return
	}
	sess := rb.sessionAt(clientID, off)
	if sess == nil {
		return
	}
	switch kind {
	case store.StateInReleased:
		delete(sess.awaitingRelLocked(), id)
		return
	case store.StateAcked:
		rb.acked(sess, off, payload)
		return
	case store.StateInAwaiting:
		sess.putAwaitingRelLocked(id, off+1) // its message record went by retention (retention.go)
		return
	}
	f := rb.flows[sess]
	if f == nil {
		f = &outFlows{byID: make(map[uint16]outFlow), done: make(map[uint64]bool)}
		rb.flows[sess] = f
	}
	switch kind {
	case store.StateOutSent:
		err = store.Sent(payload, func(msgOff uint64, id uint16) {
			f.end(id) // an id is reused only once its flow ended
			f.seq++
			f.byID[id] = outFlow{off: msgOff, hasOff: true, seq: f.seq}
		})
		if err != nil {
			rb.s.opts.Logger.Warn("skipping undecodable QoS 2 state record", "offset", off, "err", err)
		}
	case store.StateOutReleased:
		fl, ok := f.byID[id]
		if !ok {
			f.seq++
			fl.seq = f.seq // its StateOutSent lies below the session's position
		}
		fl.released, fl.relOff = true, off
		f.byID[id] = fl
	case store.StateOutCompleted:
		f.end(id)
	}
}

// end ends the flow of id: its message is never sent again.
func (f *outFlows) end(id uint16) {
	if fl, ok := f.byID[id]; ok {
		if fl.hasOff {
			f.done[fl.off] = true
		}
		delete(f.byID, id)
	}
}

// finish makes the flows inflight deliveries, to be resent on the
// session's next connection as PUBLISH with DUP and the same packet id
// (no PUBREC yet) or as PUBREL (redeliverLocked), and removes their
// messages, and those of ended flows, from the stored rings.
func (rb *qos2Rebuild) finish() {
	rb.dropAcked()
	for sess, f := range rb.flows {
		inflight := make(map[uint64]uint16, len(f.byID))
		for id, fl := range f.byID {
			switch {
			case fl.hasOff && !fl.released:
				inflight[fl.off] = id
			case fl.hasOff:
				f.done[fl.off] = true // PUBREC'd: only its PUBREL is owed
			}
		}
		entries := make(map[uint64]storedEntry)
		var keep offRing
		for sess.stored.len() > 0 {
			e := sess.stored.pop()
			if _, ok := inflight[e.off]; ok {
				entries[e.off] = e
				continue
			}
			if f.done[e.off] {
				continue
			}
			keep.push(e)
		}
		sess.stored = keep
		ids := make([]uint16, 0, len(f.byID))
		for id := range f.byID {
			ids = append(ids, id)
		}
		slices.SortFunc(ids, func(a, b uint16) int { return cmp.Compare(f.byID[a].seq, f.byID[b].seq) })
		for _, id := range ids {
			fl := f.byID[id]
			d := delivery{qos: 2, id: id, state: stateReleased}
			if fl.released {
				sess.putRelAtLocked(id, fl.relOff+1)
			} else {
				m, err := rb.s.loadStored(fl.off)
				if err != nil {
					rb.s.opts.Logger.Warn("QoS 2 message in flight no longer readable; dropped",
						"client_id", sess.clientID, "offset", fl.off, "err", err)
					sess.dropLocked(DropRetention)
					continue
				}
				d.msg, d.state = m, statePublish
				if e, ok := entries[fl.off]; ok {
					d.retain = e.retain
					if e.subID != 0 {
						d.subIDs[0], d.nSub = e.subID, 1
					}
				}
			}
			sess.seq++
			d.seq = sess.seq
			sess.putInflightLocked(id, &d)
		}
	}
}

// loadStored reads the message at log offset off back, its payload left
// in the segment file (materialize reads it when it is resent).
func (s *Shard) loadStored(off uint64) (*message, error) {
	r, err := s.log.ReadFrom(off)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errLost, err)
	}
	defer r.Close()
	rec, err := r.Next()
	if err != nil || rec.Offset != off {
		return nil, fmt.Errorf("%w: offset %d: %v", errLost, off, err)
	}
	var meta store.Meta
	if _, err := store.DecodeMeta(rec.Key, &meta); err != nil {
		return nil, err
	}
	return newStoredMessage(&meta, off, len(rec.Payload)), nil
}
