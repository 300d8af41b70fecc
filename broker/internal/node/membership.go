package node

import (
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

// memberLoop keeps the configuration of every group this node leads in
// line with the raft ids its replicas announce: a replica that came back
// under a new raft id (it lost its disk, identity.go) replaces its former
// id, as a learner first, then promoted in one joint change that removes
// the former id (replica.Group.Replace). Each step is derived from the
// configuration and the peers' ids when it is taken, so a step lost with
// a leader is taken again by the next one; no operator edits anything.
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
		for _, rg := range r.groups {
			if rg.g.Leader() == r.self {
				list = append(list, rg)
			}
		}
		r.mu.Unlock()
		version := r.host.IdentityChanges()
		for _, rg := range list {
			if r.n.ctx.Err() != nil {
				return
			}
			r.reconcile(rg, version)
		}
	}
}

// reconcile takes the next step for one group led here, if one is due.
func (r *replicas) reconcile(rg *replGroup, version uint64) {
	settled := [2]uint64{version, rg.g.Term()}
	if rg.settled == settled {
		return
	}
	old, nw, next := r.replacement(rg)
	switch next {
	case settle: // nothing to do until a peer's raft id or the term changes
		rg.settled = settled
		return
	case retry:
		return
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
}

// What reconcile does next.
const (
	settle = iota // nothing, until a peer's raft id or the term changes
	retry         // nothing now; look again at the next tick
	act           // Replace(old, nw)
)

// replacement is the change rg's configuration needs: nw, the raft id of
// a replica that is not a voter, and old, the voter it replaces (0: none,
// nw only joins): a voter that is no member's current raft id, the former
// id of a node that lost its state. Nothing is changed while a member's
// raft id is not known (a voter's id not heard of is not taken for a
// former one) nor while nw's node is not alive.
func (r *replicas) replacement(rg *replGroup) (old, nw uint64, next int) {
	cur := rg.g.Members()
	if cur.Joint {
		return 0, 0, retry // raft is leaving it
	}
	current := make([]uint64, 0, len(r.members))
	for _, m := range r.members {
		id, known := r.raftOf(m)
		if !known {
			return 0, 0, settle
		}
		current = append(current, id)
	}
	for _, m := range rg.members {
		id, _ := r.raftOf(m)
		if !slices.Contains(cur.Voters, id) {
			nw = id
			break
		}
	}
	switch {
	case nw == 0:
		return 0, 0, settle // every replica votes
	case !r.host.Alive(nw):
		return 0, 0, retry
	}
	for _, v := range cur.Voters {
		if !slices.Contains(current, v) {
			return v, nw, act
		}
	}
	if len(cur.Voters) >= len(rg.members) {
		return 0, 0, settle // no former id to replace: not this loop's to grow
	}
	return 0, nw, act
}

// voters are the raft ids of a tenant's replicas, those known (a peer's
// is known once it announced it).
func (r *replicas) voters(tenantID string) []uint64 {
	var out []uint64
	for _, m := range r.designated(tenantID) {
		if id, ok := r.raftOf(m); ok {
			out = append(out, id)
		}
	}
	slices.Sort(out)
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

// designated are the nodes holding a tenant's replicas: members ranked by
// a hash of (tenant, node) (rendezvous hashing: a node joining or leaving
// moves few tenants), taking one per zone first, so replicas sit in
// distinct failure domains when there are enough zones; sorted by id.
func (r *replicas) designated(tenantID string) []member {
	type ranked struct {
		m    member
		rank uint64
	}
	rs := make([]ranked, len(r.members))
	for i, m := range r.members {
		sum := sha256.Sum256([]byte(tenantID + "\x00" + m.id))
		rs[i] = ranked{m, binary.BigEndian.Uint64(sum[:8])}
	}
	slices.SortFunc(rs, func(a, b ranked) int { return -cmpU64(a.rank, b.rank) })
	var out []member
	zones := map[string]bool{}
	for _, x := range rs { // one per zone
		if len(out) < r.size && !zones[x.m.zone] {
			zones[x.m.zone] = true
			out = append(out, x.m)
		}
	}
	for _, x := range rs { // then by rank
		if len(out) < r.size && !slices.Contains(out, x.m) {
			out = append(out, x.m)
		}
	}
	slices.SortFunc(out, func(a, b member) int { return strings.Compare(a.id, b.id) })
	return out
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// names are members' node ids.
func names(ms []member) []string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.id)
	}
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
