package replica

import (
	"context"
	"encoding/binary"
	"errors"

	"go.etcd.io/raft/v3"
)

// Errors a proposal can end with.
var (
	ErrNotLeader = errors.New("replica: not the leader")
	ErrLost      = errors.New("replica: proposal overwritten by another leader")
	ErrClosed    = errors.New("replica: group closed")
)

// proposalHeader prefixes every proposed entry: the proposing node and its
// sequence number, so the proposer recognises its entry when it is applied
// (and one that another leader overwrote). A group starts its sequence at
// a random 64-bit number each time it opens, so an entry this node
// proposed before a restart, applied (or received again) after it, never
// matches a proposal of this boot.
const proposalHeader = 16

type proposal struct {
	seq  uint64
	data []byte
	done chan error
}

// Propose appends data to the group's log and returns once the entry is
// committed by a quorum (each voter wrote it per the fsync policy) and
// applied here. Only the leader accepts proposals (ErrNotLeader elsewhere);
// an entry another leader overwrote ends with ErrLost; ctx bounds the wait
// (a leader that lost its quorum never commits, so its callers time out).
func (g *Group) Propose(ctx context.Context, data []byte) error {
	seq := g.seq.Add(1)
	b := make([]byte, proposalHeader+len(data))
	binary.BigEndian.PutUint64(b[0:8], g.node)
	binary.BigEndian.PutUint64(b[8:16], seq)
	copy(b[proposalHeader:], data)
	p := &proposal{seq: seq, data: b, done: make(chan error, 1)}
	g.mu.Lock()
	if g.closed.Load() {
		g.mu.Unlock()
		return ErrClosed
	}
	g.pending[seq] = p
	g.mu.Unlock()
	select {
	case g.propc <- p:
	case <-ctx.Done():
		g.forget(seq)
		return ctx.Err()
	case <-g.donec:
		return ErrClosed
	}
	select {
	case err := <-p.done:
		return err
	case <-ctx.Done():
		g.forget(seq)
		return ctx.Err()
	case <-g.donec:
		return ErrClosed
	}
}

func (g *Group) forget(seq uint64) {
	g.mu.Lock()
	delete(g.pending, seq)
	g.mu.Unlock()
}

func (g *Group) finish(seq uint64, err error) {
	g.mu.Lock()
	p := g.pending[seq]
	delete(g.pending, seq)
	g.mu.Unlock()
	if p != nil {
		p.done <- err
	}
}

func (g *Group) failAll(err error) {
	g.mu.Lock()
	ps := g.pending
	g.pending = map[uint64]*proposal{}
	g.mu.Unlock()
	for _, p := range ps {
		p.done <- err
	}
}

func (g *Group) propose(p *proposal) {
	g.wake(false)
	if err := g.rn.Propose(p.data); err != nil {
		if errors.Is(err, raft.ErrProposalDropped) {
			err = ErrNotLeader
		}
		g.finish(p.seq, err)
	}
}
