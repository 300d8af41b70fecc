package node

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

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

// waitingRefresh is how soon openAll runs again when new groups wait for
// a peer's raft id (announced within a raft tick of connecting).
const waitingRefresh = 200 * time.Millisecond

var (
	errNotLeader = errors.New("node: this node does not lead the tenant's group")
	errNotVoter  = errors.New("node: this node holds no replica of the tenant")
	// errPeersUnknown: a new group's first configuration needs every
	// voter's raft id, and a peer has not announced its own yet (not
	// served here yet: CONNACK 0x9C like errNotLeader).
	errPeersUnknown = fmt.Errorf("%w: a replica's raft id is not known yet", errNotLeader)
)

// member is a node of the cluster as placement sees it.
type member struct {
	id   string
	peer uint64 // PeerID(id)
	zone string
}

// replicas are this node's side of replication.
type replicas struct {
	n       *Node
	host    *replica.Host
	self    uint64 // this incarnation's raft id (identity.go)
	members []member
	size    int // voters per tenant
	// placement records the leaderships this node wins (tenant_placement:
	// leader, replicas, epoch = term), for the gateways to route by.
	placement *placement.Recorder

	mu     sync.Mutex
	groups map[string]*replGroup // by tenant id
	// removing: groups being cleaned up after this node was removed from
	// them (removal.go), opened by nothing meanwhile.
	removing map[string]bool
	// removalFS holds the tombstones; copyErrors counts the deletions of
	// a removed group's copy that failed, copyWarned when reopenAsked
	// last logged one for a group (leadLoop's) (removal.go).
	removalFS  wal.FS
	copyErrors atomic.Uint64
	copyWarned map[uint64]time.Time

	plansMu      sync.Mutex
	plans        map[string]string // tenant id → plan (factor.go)
	plansVersion uint64            // plans changed since start

	// draining: hand every leadership over, take none (drain.go).
	draining atomic.Bool
	// movingOff: the drain moves this node's replicas too (drain.go).
	movingOff atomic.Bool
	// pendingAtStart: new groups openAll left for peers' raft ids at start.
	pendingAtStart int
	rebal          rebalancing // rebalance.go
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
	// settled is the settleKey at which memberLoop last found its
	// configuration complete (membership.go's).
	settled [4]uint64
	// recorded is the term and configuration index leadLoop last
	// recorded the placement at (placementconf.go).
	recorded [2]uint64
}

// groupList appends the groups open on this node to dst, so that a loop
// over them holds no lock.
func (r *replicas) groupList(dst []*replGroup) []*replGroup {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rg := range r.groups {
		dst = append(dst, rg)
	}
	return dst
}

// startReplication brings up the peer transport and the groups of the
// tenants this node holds a replica of.
func (n *Node) startReplication(ctx context.Context) error {
	c := n.cfg
	raftDir := filepath.Join(c.DataDir, "raft")
	inc, fresh, err := loadIncarnation(raftDir)
	if err != nil {
		return err
	}
	r := &replicas{n: n, self: raftIDOf(c.ID, inc), groups: map[string]*replGroup{}, removing: map[string]bool{}, size: c.Replicas,
		removalFS: c.removalFS, copyWarned: map[uint64]time.Time{}}
	if r.removalFS == nil {
		r.removalFS = wal.OSFS{}
	}
	r.members = append(r.members, member{id: c.ID, peer: PeerID(c.ID), zone: c.Zone})
	for _, p := range c.Peers {
		r.members = append(r.members, member{id: p.ID, peer: PeerID(p.ID), zone: p.Zone})
	}
	r.size = min(r.size, len(r.members))
	if fresh {
		n.log.Info("replication: new raft identity (a fresh raft directory): groups that exist are joined as a new member", "raft_id", r.self)
	}
	host, err := replica.New(replica.Config{
		NodeID: r.self, PeerID: PeerID(c.ID), Listen: c.PeerListen, Secret: c.PeerSecret, Dir: raftDir,
		Fsync: c.Fsync, TickInterval: c.RaftTick, Quiesce: true, Logger: n.log,
		SnapshotEntries: c.RaftSnapshotEntries, CatchUpEntries: c.RaftCatchUpEntries,
	})
	if err != nil {
		return fmt.Errorf("node: replication: %w", err)
	}
	r.host = host
	for _, p := range c.Peers {
		host.AddPeer(PeerID(p.ID), p.Addr)
	}
	if err := r.sweepRemoved(); err != nil { // removal.go
		return errors.Join(fmt.Errorf("node: replication: removed replicas: %w", err), r.close())
	}
	if r.pendingAtStart, err = r.openAll(ctx); err != nil {
		return errors.Join(err, r.close())
	}
	r.placement = placement.NewRecorder(placement.NewStore(n.pool), placement.RecorderOptions{Logger: n.log})
	r.placement.Start(n.ctx)
	n.mu.Lock()
	n.repl = r // under mu: /readyz may ask while Start runs (readyz.go)
	n.mu.Unlock()
	n.goBackground(r.leadLoop)
	n.goBackground(r.memberLoop)
	n.goBackground(r.followPlans) // shrink.go
	n.log.Info("replication up", "peer_listen", host.Addr(), "raft_id", r.self, "peers", len(c.Peers), "replicas", r.size, "groups", len(r.groups))
	return nil
}

// openAll opens the group of every tenant this node holds a replica of,
// so that it takes part in elections before any client comes. It reports
// how many new groups wait for a peer's raft id (errPeersUnknown).
func (r *replicas) openAll(ctx context.Context) (waiting int, err error) {
	ids, err := r.loadPlans(ctx)
	if err != nil {
		return 0, err
	}
	for _, id := range ids {
		switch _, err := r.group(id); {
		case errors.Is(err, errPeersUnknown):
			waiting++
		case err != nil && !errors.Is(err, errNotVoter):
			return waiting, err
		}
	}
	return waiting, nil
}

// group returns the tenant's group here, opening it (and its store) on
// first use; errNotVoter when this node holds no replica of it.
//
// A group with no raft log here is either new (no leader recorded a
// placement for the tenant yet): every replica writes the same first
// configuration, which needs every replica's raft id (errPeersUnknown
// until each has announced it); or one that exists without this node's
// state (this node lost its disk, or was down when the group began): it
// opens with no configuration and its leader adds it (memberLoop).
func (r *replicas) group(tenantID string) (*replGroup, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rg := r.groups[tenantID]; rg != nil {
		return rg, nil
	}
	if r.removing[tenantID] || r.isRemoved(tenantID) {
		return nil, errNotVoter // removed from the group (removal.go)
	}
	members := r.designated(tenantID)
	self := func(m member) bool { return m.id == r.n.cfg.ID }
	gid := replica.NameID(tenantID) // the tenant's group, the same on every node
	if !slices.ContainsFunc(members, self) && !slices.ContainsFunc(r.wanted(tenantID), self) && !r.host.HasLog(gid) {
		// Neither a first voter nor a drain's replacement, nor a replica
		// already (one that -peers moved elsewhere: a rebalance moves it).
		return nil, errNotVoter
	}
	var voters []uint64 // none: the log here has the configuration, or the leader adds this node
	if !r.host.HasLog(gid) {
		existed, err := r.placed(tenantID)
		if err != nil {
			return nil, err
		}
		if !existed {
			for _, m := range members {
				id, ok := r.raftOf(m)
				if !ok {
					return nil, errPeersUnknown
				}
				voters = append(voters, id)
			}
		}
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
	g, err := r.host.OpenGroup(gid, voters, log)
	if err != nil {
		_ = st.Close()
		return nil, fmt.Errorf("node: replication group of %s: %w", tenantID, err)
	}
	if voters == nil && g.Applied() == 0 {
		r.n.log.Info("replication: joining an existing group as a new member", "tenant_id", tenantID, "raft_id", r.self)
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
	refreshed, waiting := time.Now(), 0
	if r.pendingAtStart > 0 {
		refreshed, waiting = time.Time{}, r.pendingAtStart
	}
	ids := r.host.IdentityChanges()
	for {
		select {
		case <-r.n.ctx.Done():
			return
		case now := <-tick.C:
			// Tenants created since: their groups need every voter. New
			// groups waiting for a peer's raft id: again soon.
			// A peer's raft id or drain changed: groups this node should
			// now hold a replica of (a drain's replacement) open at once.
			changed := r.host.IdentityChanges() != ids
			if d := now.Sub(refreshed); changed || d >= tenantsRefresh || (waiting > 0 && d >= waitingRefresh) {
				refreshed, ids = now, r.host.IdentityChanges()
				ctx, cancel := context.WithTimeout(r.n.ctx, 5*time.Second)
				var err error
				if waiting, err = r.openAll(ctx); err != nil {
					r.n.log.Warn("replication: opening new tenants' groups", "err", err)
				}
				cancel()
			}
		}
		list = r.groupList(list[:0])
		budget := max(1, int(drainPerSecond*every/time.Second)) // leadership transfers this tick
		now := time.Now()
		for _, rg := range list {
			if budget > 0 && r.draining.Load() && rg.g.Leader() == r.self && r.handOff(rg, now) {
				budget--
			}
			r.follow(rg)
			if !r.cleanUpRemoved(rg) { // removal.go
				r.recordConfig(rg) // placementconf.go
			}
		}
		r.reopenAsked()
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
	r.placement.Leading(placement.Placement{TenantID: rg.id, Leader: r.n.cfg.ID, Replicas: r.voterNames(rg), Epoch: term, ConfigIndex: rg.g.ConfIndex()})
	r.n.log.Info("tenant led here", "tenant_id", rg.id, "term", term)
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
// are closed, at the node's move rate (moverate.go).
func (n *Node) stepDown(t *tenant) {
	n.mu.Lock()
	if n.closing || n.tenants[t.id] != t {
		n.mu.Unlock()
		return
	}
	delete(n.tenants, t.id)
	n.closingTenants[t.id] = make(chan struct{})
	n.mu.Unlock()
	n.goBackground(func() {
		n.moveOff(t)
		n.closeTenant(t, packet.ErrUseAnotherServer)
	})
}
