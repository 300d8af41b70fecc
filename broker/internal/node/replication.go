package node

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/broker/internal/placement"
	"berth.dev/broker/internal/replica"
	"berth.dev/broker/internal/store"
	"berth.dev/broker/internal/tenantlog"
	"berth.dev/broker/internal/wal"
	"berth.dev/broker/packet"
)

// Replication (issue #17, docs/replication.md). With Config.Peers every
// tenant is replicated by its own Raft group (package replica) over
// Config.Replicas voters; its store is the group's state machine (package
// tenantlog). Only the node leading a tenant's group serves it: elsewhere a
// CONNECT is answered CONNACK 0x9C (3.1.1: 3, server unavailable), and a
// leader that loses its group disconnects the tenant's clients with 0x9C.
//
//	follower ──(group elects this node)──▶ starting: barrier proposed
//	   ▲                                      │ committed and applied here
//	   │                                      ▼
//	   └──(another leader, a failed proposal)── serving: shard opens on demand

// Peer is another node of the cluster.
type Peer struct {
	ID   string // its node id (Config.ID)
	Addr string // its peer transport address (its Config.PeerListen)
	Zone string // its failure domain; "" none
}

// Serving states of a replicated tenant on this node.
const (
	following int32 = iota
	starting
	serving
)

// tenantsRefresh is how often the tenants table is read for tenants
// created since (their groups open on every voter).
const tenantsRefresh = 5 * time.Second

var (
	errNotLeader = errors.New("node: this node does not lead the tenant's group")
	errNotVoter  = errors.New("node: this node holds no replica of the tenant")
)

// RaftID is the raft id of a node id: the first 8 bytes of its SHA-256,
// never 0. Every node computes the same.
func RaftID(nodeID string) uint64 {
	sum := sha256.Sum256([]byte(nodeID))
	if id := binary.BigEndian.Uint64(sum[:8]); id != 0 {
		return id
	}
	return 1
}

// member is a node of the cluster as placement sees it.
type member struct {
	id   string
	raft uint64
	zone string
}

// replicas are this node's side of replication.
type replicas struct {
	n       *Node
	host    *replica.Host
	self    uint64
	members []member
	size    int // voters per tenant
	// placement records the leaderships this node wins (tenant_placement:
	// leader, replicas, epoch = term), for the gateways to route by.
	placement *placement.Recorder

	mu     sync.Mutex
	groups map[string]*replGroup // by tenant id

	// draining: hand every leadership over, take none (drain.go).
	draining atomic.Bool
}

// replGroup is a tenant's group on this node.
type replGroup struct {
	id    string
	g     *replica.Group
	log   *tenantlog.Log
	state atomic.Int32
	// handOffAt is when a drain last asked the group to transfer its
	// leadership (leadLoop's).
	handOffAt time.Time
}

// startReplication brings up the peer transport and the groups of the
// tenants this node holds a replica of.
func (n *Node) startReplication(ctx context.Context) error {
	c := n.cfg
	r := &replicas{n: n, self: RaftID(c.ID), groups: map[string]*replGroup{}, size: c.Replicas}
	r.members = append(r.members, member{id: c.ID, raft: r.self, zone: c.Zone})
	for _, p := range c.Peers {
		r.members = append(r.members, member{id: p.ID, raft: RaftID(p.ID), zone: p.Zone})
	}
	r.size = min(r.size, len(r.members))
	host, err := replica.New(replica.Config{
		NodeID: r.self, Listen: c.PeerListen, Secret: c.PeerSecret, Dir: filepath.Join(c.DataDir, "raft"),
		Fsync: c.Fsync, TickInterval: c.RaftTick, Quiesce: true, Logger: n.log,
		SnapshotEntries: c.RaftSnapshotEntries, CatchUpEntries: c.RaftCatchUpEntries,
	})
	if err != nil {
		return fmt.Errorf("node: replication: %w", err)
	}
	r.host = host
	for _, p := range c.Peers {
		host.AddPeer(RaftID(p.ID), p.Addr)
	}
	if err := r.openAll(ctx); err != nil {
		return errors.Join(err, r.close())
	}
	r.placement = placement.NewRecorder(placement.NewStore(n.pool), placement.RecorderOptions{Logger: n.log})
	r.placement.Start(n.ctx)
	n.mu.Lock()
	n.repl = r // under mu: /readyz may ask while Start runs (readyz.go)
	n.mu.Unlock()
	n.goBackground(r.leadLoop)
	n.log.Info("replication up", "peer_listen", host.Addr(), "raft_id", r.self, "peers", len(c.Peers), "replicas", r.size, "groups", len(r.groups))
	return nil
}

// openAll opens the group of every tenant this node holds a replica of,
// so that it takes part in elections before any client comes.
func (r *replicas) openAll(ctx context.Context) error {
	rows, err := r.n.pool.Query(ctx, `SELECT id FROM tenants`)
	if err != nil {
		return fmt.Errorf("node: replication: tenants: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("node: replication: tenants: %w", err)
	}
	for _, id := range ids {
		if _, err := r.group(id); err != nil && !errors.Is(err, errNotVoter) {
			return err
		}
	}
	return nil
}

// voters are the raft ids of a tenant's replicas: members ranked by a
// hash of (tenant, node) (rendezvous hashing: a node joining or leaving
// moves few tenants), taking one per zone first, so replicas sit in
// distinct failure domains when there are enough zones.
func (r *replicas) voters(tenantID string) []uint64 {
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
	var out []uint64
	zones := map[string]bool{}
	for _, x := range rs { // one per zone
		if len(out) < r.size && !zones[x.m.zone] {
			zones[x.m.zone] = true
			out = append(out, x.m.raft)
		}
	}
	for _, x := range rs { // then by rank
		if len(out) < r.size && !slices.Contains(out, x.m.raft) {
			out = append(out, x.m.raft)
		}
	}
	slices.Sort(out)
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

// group returns the tenant's group here, opening it (and its store) on
// first use; errNotVoter when this node holds no replica of it.
func (r *replicas) group(tenantID string) (*replGroup, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rg := r.groups[tenantID]; rg != nil {
		return rg, nil
	}
	voters := r.voters(tenantID)
	if !slices.Contains(voters, r.self) {
		return nil, errNotVoter
	}
	c := r.n.cfg
	// The raft log is the durable copy; the store is fsynced when the
	// group snapshots (tenantlog.Log.Snapshot) and on close.
	st, err := store.OpenTenant(c.DataDir, tenantID, store.WALOptions{
		Fsync: wal.SyncInterval, FsyncInterval: c.FsyncInterval, Logger: r.n.log.With("tenant_id", tenantID),
		OnFsync: r.n.metrics().observeFsync,
	})
	if err != nil {
		return nil, fmt.Errorf("node: storage of %s: %w", tenantID, err)
	}
	log := tenantlog.New(st, tenantlog.Options{ProposeTimeout: c.ProposeTimeout, Logger: r.n.log.With("tenant_id", tenantID)})
	g, err := r.host.OpenGroup(tenantlog.GroupID(tenantID), voters, log)
	if err != nil {
		_ = st.Close()
		return nil, fmt.Errorf("node: replication group of %s: %w", tenantID, err)
	}
	rg := &replGroup{id: tenantID, g: g, log: log}
	r.groups[tenantID] = rg
	return rg, nil
}

// serving returns the tenant's log when this node serves the tenant:
// errNotLeader (or errNotVoter) otherwise.
func (r *replicas) serving(tenantID string) (*tenantlog.Log, error) {
	rg, err := r.group(tenantID)
	if err != nil {
		return nil, err
	}
	if rg.state.Load() != serving || !rg.log.Leading() {
		return nil, errNotLeader
	}
	return rg.log, nil
}

// leadLoop follows every group's leadership: it starts serving a tenant
// whose group elected this node (after its barrier) and closes the shard
// of one whose group did not, or no longer does.
func (r *replicas) leadLoop() {
	every := max(r.n.cfg.RaftTick/2, 5*time.Millisecond)
	tick := time.NewTicker(every)
	defer tick.Stop()
	var list []*replGroup
	refreshed := time.Now()
	for {
		select {
		case <-r.n.ctx.Done():
			return
		case now := <-tick.C:
			if now.Sub(refreshed) >= tenantsRefresh {
				// Tenants created since: their groups need every voter.
				refreshed = now
				ctx, cancel := context.WithTimeout(r.n.ctx, 5*time.Second)
				if err := r.openAll(ctx); err != nil {
					r.n.log.Warn("replication: opening new tenants' groups", "err", err)
				}
				cancel()
			}
		}
		r.mu.Lock()
		list = list[:0]
		for _, rg := range r.groups {
			list = append(list, rg)
		}
		r.mu.Unlock()
		budget := max(1, int(drainPerSecond*every/time.Second)) // leadership transfers this tick
		now := time.Now()
		for _, rg := range list {
			if budget > 0 && r.draining.Load() && rg.g.Leader() == r.self && r.handOff(rg, now) {
				budget--
			}
			r.follow(rg)
		}
	}
}

// follow moves one tenant between following, starting and serving.
func (r *replicas) follow(rg *replGroup) {
	lead := rg.g.Leader() == r.self
	switch st := rg.state.Load(); {
	case st == following && lead && !r.draining.Load():
		rg.state.Store(starting)
		r.n.goBackground(func() { r.lead(rg) })
	case st == serving && (!lead || !rg.log.Leading()):
		rg.log.Stop() // nothing more is acknowledged
		rg.state.Store(following)
		r.n.log.Info("tenant no longer led here", "tenant_id", rg.id, "leader", rg.g.Leader(), "term", rg.g.Term())
	}
	if rg.state.Load() != serving {
		if t, ok := r.n.lookup(rg.id); ok {
			r.n.stepDown(t)
		}
	}
}

// lead proposes the barrier that makes this node serve the tenant.
func (r *replicas) lead(rg *replGroup) {
	ctx, cancel := context.WithTimeout(r.n.ctx, r.n.cfg.ProposeTimeout)
	defer cancel()
	if err := rg.log.Lead(ctx, rg.g); err != nil {
		r.n.log.Warn("tenant leadership not taken", "tenant_id", rg.id, "err", err)
		rg.state.Store(following)
		return
	}
	rg.state.Store(serving)
	term := rg.g.Term()
	r.placement.Leading(placement.Placement{TenantID: rg.id, Leader: r.n.cfg.ID, Replicas: r.names(r.voters(rg.id)), Epoch: term})
	r.n.log.Info("tenant led here", "tenant_id", rg.id, "term", term)
}

// names are the node ids of raft ids.
func (r *replicas) names(ids []uint64) []string {
	out := make([]string, 0, len(ids))
	for _, m := range r.members {
		if slices.Contains(ids, m.raft) {
			out = append(out, m.id)
		}
	}
	slices.Sort(out)
	return out
}

// close stops the groups (and the transport), then closes the stores and
// the placement writer (pending writes are abandoned: the next leader
// records again).
func (r *replicas) close() error {
	err := r.host.Close()
	if r.placement != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = errors.Join(err, r.placement.Shutdown(ctx))
		cancel()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rg := range r.groups {
		err = errors.Join(err, rg.log.Close())
	}
	return err
}

// stepDown closes an open tenant shard this node no longer serves: its
// MQTT 5 clients get DISCONNECT 0x9C (use another server), 3.1.1 clients
// are closed.
func (n *Node) stepDown(t *tenant) {
	n.mu.Lock()
	if n.closing || n.tenants[t.id] != t {
		n.mu.Unlock()
		return
	}
	delete(n.tenants, t.id)
	n.closingTenants[t.id] = make(chan struct{})
	n.mu.Unlock()
	n.goBackground(func() { n.closeTenant(t, packet.ErrUseAnotherServer) })
}
