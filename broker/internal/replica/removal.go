package replica

import (
	"fmt"
	"math"
	"os"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// A node removed from a group (Group.Removed) stops it (RetireGroup, which
// makes sure it holds no change adding it back) and deletes its raft log
// (RemoveGroupData). Should the group want this node
// back later (a plan upgrade, a drain undone), its leader adds it as a
// learner and sends it appends or a snapshot: those land on no open
// group, and the host lists the group in Asked, so that the node may open
// it again, empty, and be caught up like any new member.

// maxAsked bounds the groups Asked remembers between two calls.
const maxAsked = 1024

// CloseGroup stops group id's loop, closes its raft log and forgets the
// group (its messages are counted as for an unknown group from then on).
// The state machine is the caller's to close. Closing a group not open is
// not an error.
func (h *Host) CloseGroup(id uint64) error {
	h.mu.Lock()
	g := h.groups[id]
	delete(h.groups, id)
	h.mu.Unlock()
	if g == nil {
		return nil
	}
	return g.stop()
}

// RetireGroup stops group id when this node is no member of the
// configuration it applied last (Group.Removed) and its log holds no
// configuration change it has not applied yet; it reports whether it did
// (false: a member, or a change to apply first, such as the one adding this
// node back: the group runs on). The check and the stop are one turn of
// the group's loop, so nothing is acknowledged after the check: a leader
// that added this node back since holds no acknowledgement of it (one
// would mean this log holds that change), so it catches the node up from
// nothing, by snapshot, and the copy may be deleted (RemoveGroupData).
// Deleting it after Removed alone could leave the leader counting entries
// this node acknowledged and no longer has: it would send them from there
// on, never lower, and its heartbeats would commit past the empty log.
func (h *Host) RetireGroup(id uint64) (bool, error) {
	h.mu.Lock()
	g := h.groups[id]
	h.mu.Unlock()
	if g == nil {
		return false, nil
	}
	res := make(chan bool, 1)
	call := func() {
		g.retired = g.retirable()
		res <- g.retired
	}
	select {
	case g.callc <- call:
	case <-g.donec:
		return false, ErrClosed
	}
	if !<-res {
		return false, nil
	}
	return true, h.CloseGroup(id)
}

// retirable (loop) reports whether the configuration applied excludes this
// node and no entry after the applied one is a configuration change.
func (g *Group) retirable() bool {
	if !removedFrom(g.confState, g.node) {
		return false
	}
	last, err := g.store.LastIndex()
	if err != nil {
		return false
	}
	if last <= g.applied {
		return true
	}
	ents, err := g.store.Entries(g.applied+1, last+1, math.MaxUint64)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if t := e.GetType(); t == pb.EntryConfChange || t == pb.EntryConfChangeV2 {
			return false
		}
	}
	return true
}

// RemoveGroupData deletes group id's raft log and snapshots from disk; the
// group must not be open.
func (h *Host) RemoveGroupData(id uint64) error {
	h.mu.Lock()
	open := h.groups[id] != nil
	h.mu.Unlock()
	if open {
		return fmt.Errorf("replica: group %d is open", id)
	}
	if err := os.RemoveAll(h.groupDir(id)); err != nil {
		return fmt.Errorf("replica: remove group %d: %w", id, err)
	}
	return nil
}

// Asked returns, and forgets, the groups not open here that a peer sent
// a leader's message to (an append, a heartbeat, a snapshot) since the
// last call: groups whose leader counts this node as a member.
func (h *Host) Asked() []uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.asked) == 0 {
		return nil
	}
	out := make([]uint64, 0, len(h.asked))
	for id := range h.asked {
		out = append(out, id)
	}
	clear(h.asked)
	return out
}

// noteAsked records a frame for a group not open here when it is a
// leader's message (or a snapshot stream's start).
func (h *Host) noteAsked(kind byte, group uint64, payload []byte) {
	switch kind {
	case kindSnapBegin:
	case kindRaft, kindQuiesce:
		m := new(pb.Message)
		if proto.Unmarshal(payload, m) != nil {
			return
		}
		switch m.GetType() {
		case pb.MsgApp, pb.MsgHeartbeat, pb.MsgSnap:
		default:
			return
		}
	default:
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.asked == nil {
		h.asked = map[uint64]struct{}{}
	}
	if len(h.asked) < maxAsked {
		h.asked[group] = struct{}{}
	}
}
