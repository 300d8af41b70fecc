package replica

import (
	"encoding/binary"
	"fmt"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// apply delivers committed entries to the state machine in order, applies
// configuration changes to raft, and ends the proposals this node is
// waiting on: nil when its own entry is at the index it was given, ErrLost
// when another leader's entry took that index.
func (g *Group) apply(ents []*pb.Entry) error {
	for _, e := range ents {
		idx := e.GetIndex()
		switch e.GetType() {
		case pb.EntryNormal:
			d := e.GetData()
			if len(d) == 0 {
				break // a new leader's empty entry
			}
			if len(d) < proposalHeader {
				return fmt.Errorf("%w: entry %d is %d bytes", ErrLogCorrupt, idx, len(d))
			}
			want, waiting := g.byIndex[idx]
			if waiting && (binary.BigEndian.Uint64(d[0:8]) != g.node || binary.BigEndian.Uint64(d[8:16]) != want) {
				// Another leader's entry took the index: the proposer learns
				// it before the state machine sees that entry (and wakes
				// anyone waiting on what it applies).
				delete(g.byIndex, idx)
				g.finish(want, ErrLost)
				waiting = false
			}
			if err := g.sm.Apply(idx, d[proposalHeader:]); err != nil {
				return fmt.Errorf("replica: apply %d: %w", idx, err)
			}
			if waiting {
				delete(g.byIndex, idx)
				g.finish(want, nil)
			}
		case pb.EntryConfChange:
			var cc pb.ConfChange
			if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
				return fmt.Errorf("%w: conf change %d: %v", ErrLogCorrupt, idx, err)
			}
			g.confState = g.rn.ApplyConfChange(&cc)
			g.confNext = idx
		case pb.EntryConfChangeV2:
			var cc pb.ConfChangeV2
			if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
				return fmt.Errorf("%w: conf change %d: %v", ErrLogCorrupt, idx, err)
			}
			g.confState = g.rn.ApplyConfChange(&cc)
			g.confNext = idx
		}
		if idx > g.applied {
			g.applied = idx
		}
		if want, ok := g.byIndex[idx]; ok { // an empty or conf entry where ours was
			delete(g.byIndex, idx)
			g.finish(want, ErrLost)
		}
	}
	return nil
}

// maybeSnapshot compacts the log every SnapshotEntries applied entries, or
// sooner when the entries held in memory pass MaxLogBytes.
func (g *Group) maybeSnapshot() error {
	cfg := &g.h.cfg
	byCount := g.applied >= g.store.snapIndex+cfg.SnapshotEntries
	byBytes := g.applied > g.store.snapIndex && g.store.MemBytes() > cfg.MaxLogBytes
	if !byCount && !byBytes {
		return nil
	}
	data, err := g.sm.Snapshot()
	if err != nil {
		return fmt.Errorf("replica: snapshot: %w", err)
	}
	return g.store.Compact(g.applied, g.confState, data, cfg.CatchUpEntries, cfg.MaxLogBytes/2)
}
