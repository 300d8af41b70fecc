package replica

import (
	"fmt"
	"os"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// A node removed from a group (Group.Removed) closes it (CloseGroup) and
// deletes its raft log (RemoveGroupData). Should the group want this node
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
