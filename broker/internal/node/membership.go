package node

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"berth.dev/broker/internal/replica"
)

// memberEvery is how often memberLoop looks at the groups led here.
const memberEvery = 250 * time.Millisecond

// maxMoves is how many membership changes (a learner added and not yet
// promoted, or a joint configuration not yet left) the groups led by one
// node have in flight at most: a drain moves replicas at a bounded rate.
const maxMoves = 4

// memberLoop keeps the configuration of every group this node leads in
// line with the replicas the group should have (wanted): a replica that
// came back under a new raft id (it lost its disk, identity.go) replaces
// its former id; a replica on a draining node is replaced by the next
// node by rank not draining (drain.go); a group whose plan asks for more
// voters grows. Each move is a learner first, then promoted in one joint
// change that removes the voter it replaces (replica.Group.Replace). Each
// step is derived from the configuration and the peers' ids and flags
// when it is taken, so a step lost with a leader is taken again by the
// next one; no operator edits anything.
func (r *replicas) memberLoop() {
	tick := time.NewTicker(memberEvery)
	defer tick.Stop()
	var list []*replGroup
	for {
		select {
		case <-r.n.ctx.Done():
			return
		case <-tick.C:
		}
		r.mu.Lock()
		list = list[:0]
		leaderless := false // a group this node votes in elects: nobody judges it meanwhile
		for _, rg := range r.groups {
			switch l := rg.g.Leader(); {
			case l == r.self:
				list = append(list, rg)
			case l == 0 && slices.Contains(rg.g.Members().Voters, r.self):
				leaderless = true
			}
		}
		r.mu.Unlock()
		slices.SortFunc(list, func(a, b *replGroup) int { return strings.Compare(a.id, b.id) })
		moving := 0
		for _, rg := range list {
			if m := rg.g.Members(); m.Joint || len(m.Learners) > 0 {
				moving++
			}
		}
		for _, rg := range list {
			if r.n.ctx.Err() != nil {
				return
			}
			if r.reconcile(rg, moving < maxMoves) {
				moving++
			}
		}
		r.rebalancePass(list, leaderless) // rebalancepass.go
	}
}

// reconcile takes the next step for one group led here, if one is due; a
// new move (a learner added) only when start. It reports whether it
// started one.
func (r *replicas) reconcile(rg *replGroup, start bool) bool {
	settled := r.settleKey(rg)
	if rg.settled == settled {
		return false
	}
	old, nw, next := r.replacement(rg)
	switch next {
	case settle: // nothing to do until a peer's raft id, a flag, a plan or the term changes
		rg.settled = settled
		return false
	case retry:
		return false
	case remove:
		r.remove(rg, old)
		return false
	}
	cur := rg.g.Members()
	starting := !slices.Contains(cur.Learners, nw) && !slices.Contains(cur.Voters, nw)
	if starting && !start {
		return false // maxMoves in flight: at a later tick
	}
	ctx, cancel := context.WithTimeout(r.n.ctx, 2*time.Second)
	defer cancel()
	done, err := rg.g.Replace(ctx, old, nw)
	switch {
	case errors.Is(err, replica.ErrNotLeader), errors.Is(err, replica.ErrClosed), errors.Is(err, context.Canceled):
	case err != nil:
		r.n.log.Warn("replication: replacing a replica", "tenant_id", rg.id, "old", old, "new", nw, "err", err)
	case done:
		r.n.log.Info("replication: replica replaced", "tenant_id", rg.id, "old", old, "new", nw, "voters", rg.g.Members().Voters)
	}
	return starting && err == nil
}

// remove removes a learner whose move was abandoned, or a draining
// node's voter the group no longer needs.
func (r *replicas) remove(rg *replGroup, id uint64) {
	ctx, cancel := context.WithTimeout(r.n.ctx, 2*time.Second)
	defer cancel()
	done, err := rg.g.Remove(ctx, id)
	switch {
	case errors.Is(err, replica.ErrNotLeader), errors.Is(err, replica.ErrClosed), errors.Is(err, context.Canceled):
	case err != nil:
		r.n.log.Warn("replication: removing a member", "tenant_id", rg.id, "member", id, "err", err)
	case done:
		r.n.log.Info("replication: member removed", "tenant_id", rg.id, "member", id, "voters", rg.g.Members().Voters)
	}
}

// What reconcile does next.
const (
	settle = iota // nothing, until a peer's raft id or flag, a plan or the term changes
	retry         // nothing now; look again at the next tick
	act           // Replace(old, nw)
	remove        // Remove(old): a learner no replica is wanted on, or a draining voter too many
)

// replacement is the change rg's configuration needs: nw, the raft id of
// a wanted replica that is not a voter, and old, the voter it replaces
// (0: none, nw only joins): a voter that is no member's current raft id
// (the former id of a node that lost its state), else a voter on a
// draining node other than this one. When this node drains and leads, nw
// joins without replacing anything (the group has a voter too many until
// the next leader, once the leadership is handed over, removes this
// node's: a group of one voter can move that way too). Nothing is changed
// while a member's raft id is not known (a voter's id not heard of is not
// taken for a former one) nor while nw's node is not alive. A learner on
// no wanted node (a drain ended before its move was done) is removed.
func (r *replicas) replacement(rg *replGroup) (old, nw uint64, next int) {
	cur := rg.g.Members()
	if cur.Joint {
		return 0, 0, retry // raft is leaving it
	}
	current := make([]uint64, 0, len(r.members))
	draining := map[uint64]bool{}
	for _, m := range r.members {
		id, known := r.raftOf(m)
		if !known {
			return 0, 0, settle
		}
		current = append(current, id)
		draining[id] = r.isDraining(m)
	}
	wanted := r.wanted(rg.id)
	var want []uint64
	for _, m := range wanted {
		id, _ := r.raftOf(m)
		want = append(want, id)
		if nw == 0 && !slices.Contains(cur.Voters, id) {
			nw = id
		}
	}
	if nw == 0 || !slices.Contains(cur.Learners, nw) {
		for _, l := range cur.Learners {
			if slices.Contains(current, l) && !slices.Contains(want, l) {
				return l, 0, remove
			}
		}
	}
	if old, next := r.shrink(rg, cur, want); next != settle { // a lower factor: shrink.go
		return old, 0, next
	}
	if nw == 0 {
		// A draining voter goes only when the group has one too many (its
		// replacement votes already): measured against the factor, not
		// against the nodes left, so a group no node can take keeps its
		// voter there (drain.go, "kept").
		for _, v := range cur.Voters {
			if draining[v] && v != r.self && len(cur.Voters) > r.factor(rg.id) {
				return v, 0, remove
			}
		}
		return r.rebalanceReplacement(rg, cur, want, 0) // every wanted replica votes: a voter too many?
	}
	switch {
	case !r.host.Alive(nw):
		return 0, 0, retry
	}
	for _, v := range cur.Voters {
		if !slices.Contains(current, v) {
			return v, nw, act
		}
	}
	for _, v := range cur.Voters {
		if draining[v] && v != r.self { // the leader hands its leadership over first
			return v, nw, act
		}
	}
	if len(cur.Voters) >= len(wanted) && !(draining[r.self] && slices.Contains(cur.Voters, r.self)) {
		return r.rebalanceReplacement(rg, cur, want, nw) // not short of voters: a rebalance's move?
	}
	return 0, nw, act
}

// isDraining reports whether m drains (this node's own flag, or the one a
// peer last announced).
func (r *replicas) isDraining(m member) bool {
	if m.id == r.n.cfg.ID {
		return r.movingOff.Load()
	}
	return r.host.PeerDraining(m.peer)
}

// voterNames are the node ids of rg's voters (placement's replicas).
func (r *replicas) voterNames(rg *replGroup) []string {
	voters := rg.g.Members().Voters
	var out []string
	for _, m := range r.members {
		if id, ok := r.raftOf(m); ok && slices.Contains(voters, id) {
			out = append(out, m.id)
		}
	}
	return out
}

// raftOf is a member's current raft id: this node's own, or the one the
// peer last announced (false: none yet).
func (r *replicas) raftOf(m member) (uint64, bool) {
	if m.id == r.n.cfg.ID {
		return r.self, true
	}
	return r.host.PeerRaftID(m.peer)
}

// designated are the nodes holding a tenant's replicas at first (its
// group's first configuration; every replica computes the same, so the
// drain flags, which peers may see at different times, play no part).
func (r *replicas) designated(tenantID string) []member {
	return r.ranked(tenantID, r.factor(tenantID), nil)
}

// wanted are the nodes that should hold a tenant's replicas now: as
// designated, but skipping draining nodes (fewer when too few nodes are
// left).
func (r *replicas) wanted(tenantID string) []member {
	return r.ranked(tenantID, r.factor(tenantID), r.isDraining)
}

// ranked are size members (but none skip says) ranked by a hash of
// (tenant, node) (rendezvous hashing: a node joining or leaving moves few
// tenants), taking one per zone first, so replicas sit in distinct
// failure domains when there are enough zones; sorted by id.
func (r *replicas) ranked(tenantID string, size int, skip func(member) bool) []member {
	type rankedMember struct {
		m    member
		rank uint64
	}
	rs := make([]rankedMember, 0, len(r.members))
	for _, m := range r.members {
		if skip != nil && skip(m) {
			continue
		}
		sum := sha256.Sum256([]byte(tenantID + "\x00" + m.id))
		rs = append(rs, rankedMember{m, binary.BigEndian.Uint64(sum[:8])})
	}
	slices.SortFunc(rs, func(a, b rankedMember) int { return cmp.Compare(b.rank, a.rank) }) // highest first
	var out []member
	zones := map[string]bool{}
	for _, x := range rs { // one per zone
		if len(out) < size && !zones[x.m.zone] {
			zones[x.m.zone] = true
			out = append(out, x.m)
		}
	}
	for _, x := range rs { // then by rank
		if len(out) < size && !slices.Contains(out, x.m) {
			out = append(out, x.m)
		}
	}
	slices.SortFunc(out, func(a, b member) int { return strings.Compare(a.id, b.id) })
	return out
}

// placed reports whether a leader recorded a placement for the tenant:
// its group exists (a leader was elected in it and committed its
// barrier).
func (r *replicas) placed(tenantID string) (bool, error) {
	ctx, cancel := context.WithTimeout(r.n.ctx, 5*time.Second)
	defer cancel()
	var ok bool
	err := r.n.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tenant_placement WHERE tenant_id = $1)`, tenantID).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("node: replication: placement of %s: %w", tenantID, err)
	}
	return ok, nil
}
