package replica

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// StateMachine is what a group applies committed entries to. The group calls
// it from its loop only, in log order; an error stops the group (the node
// must not go on with a state it could not build).
type StateMachine interface {
	// Apply applies the entry at index; data is valid only during the call.
	Apply(index uint64, data []byte) error
	// Snapshot returns the state as of the last applied index.
	Snapshot() ([]byte, error)
	// Restore replaces the state with a snapshot's.
	Restore(data []byte) error
}

// batchMax bounds how many queued proposals or messages one loop turn takes
// into one Ready (one WAL write, one fsync).
const batchMax = 512

type inMsg struct {
	m       *pb.Message
	quiesce bool
}

// Group is one replication group on this node: a raft.RawNode, its
// LogStore, its state machine and the loop that drives them.
type Group struct {
	id, node uint64
	h        *Host
	rn       *raft.RawNode
	store    *LogStore
	sm       StateMachine
	log      *slog.Logger

	tickc  chan struct{}
	pokec  chan struct{}
	recvc  chan inMsg
	propc  chan *proposal
	snapc  chan snapResult
	xferc  chan uint64 // TransferLeadership's target
	callc  chan func() // run in the loop (membership.go)
	stopc  chan struct{}
	donec  chan struct{}
	closed atomic.Bool

	stopOnce sync.Once
	stopErr  error

	quiesced  atomic.Bool
	idleTicks int

	mu      sync.Mutex
	pending map[uint64]*proposal // by seq, guarded by mu
	seq     atomic.Uint64

	// Owned by the loop.
	byIndex   map[uint64]uint64 // log index → seq of this node's entry there
	applied   uint64
	confState *pb.ConfState
	// confWait: a configuration change this node proposed will be at
	// this index at the latest; none is proposed before it is applied.
	confWait  uint64
	confAtom  atomic.Pointer[pb.ConfState] // confState, for other goroutines
	confSeen  *pb.ConfState                // confState when handleReady last looked
	streaming map[uint64]bool              // followers a snapshot stream runs to
	retired   bool                         // RetireGroup: the loop ends after its call
	lead      uint64
	err       error
	leadAtom  atomic.Uint64
	termAtom  atomic.Uint64
	applAtom  atomic.Uint64

	// What this node has heard of the group's progress (progress.go).
	knownCommit atomic.Uint64
	heardTerm   atomic.Uint64

	// For metrics and removal (status.go): the index of the configuration
	// applied, this node's raft role, and (leading) the most committed
	// entries a follower lacks, as of the last tick.
	confIdx  atomic.Uint64 // stored after confAtom, read before it
	confNext uint64        // (loop) the index of confState
	roleAtom atomic.Uint32
	lagAtom  atomic.Uint64
}

func newGroup(h *Host, id uint64, voters []uint64, sm StateMachine) (*Group, error) {
	log := h.log.With("group", id)
	store, err := openLogStore(h.groupDir(id), h.cfg.Fsync, h.cfg.SegmentBytes, voters, log)
	if err != nil {
		return nil, err
	}
	_, cs, _ := store.InitialState()
	rn, err := raft.NewRawNode(&raft.Config{
		ID: h.cfg.NodeID, ElectionTick: h.cfg.ElectionTick, HeartbeatTick: h.cfg.HeartbeatTick,
		Storage: store, MaxSizePerMsg: 1 << 20, MaxInflightMsgs: 256, MaxUncommittedEntriesSize: 64 << 20,
		CheckQuorum: true, PreVote: true, DisableProposalForwarding: true, Logger: raftLogger{log},
	})
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("replica: group %d: %w", id, err)
	}
	g := &Group{
		id: id, node: h.cfg.NodeID, h: h, rn: rn, store: store, sm: sm, log: log,
		tickc: make(chan struct{}, 1), pokec: make(chan struct{}, 1),
		recvc: make(chan inMsg, 1024), propc: make(chan *proposal, 1024), snapc: make(chan snapResult, 1), xferc: make(chan uint64, 1), callc: make(chan func()), streaming: map[uint64]bool{},
		stopc: make(chan struct{}), donec: make(chan struct{}),
		pending: map[uint64]*proposal{}, byIndex: map[uint64]uint64{},
		confState: proto.Clone(cs).(*pb.ConfState),
	}
	g.seq.Store(rand.Uint64()) // per boot: see proposalHeader
	g.confAtom.Store(g.confState)
	hs, _, _ := store.InitialState()
	g.noteCommit(hs.GetCommit()) // entries committed before a restart are applied again first
	snap, _ := store.Snapshot()
	if !raft.IsEmptySnap(snap) {
		if err := sm.Restore(snap.GetData()); err != nil {
			store.Close()
			return nil, fmt.Errorf("replica: group %d: restore: %w", id, err)
		}
		g.applied = snap.GetMetadata().GetIndex()
		g.confNext = g.applied
		g.confIdx.Store(g.applied)
	}
	return g, nil
}

// ID is the group's id.
func (g *Group) ID() uint64 { return g.id }

// Leader is the node this group last knew as leader (0: none).
func (g *Group) Leader() uint64 { return g.leadAtom.Load() }

// Term is the group's current term (the placement's epoch).
func (g *Group) Term() uint64 { return g.termAtom.Load() }

// Applied is the index of the last entry applied to the state machine.
func (g *Group) Applied() uint64 { return g.applAtom.Load() }

// FirstIndex is the first raft log entry this node still has (in memory;
// before it, a follower needs a snapshot).
func (g *Group) FirstIndex() uint64 {
	i, _ := g.store.FirstIndex() // MemoryStorage: safe from any goroutine
	return i
}

// TransferLeadership asks the group, if this node leads it, to hand the
// leadership to voter to (raft's leadership transfer: the leader stops
// taking proposals, catches to up, then tells it to campaign at once; it
// gives up after an election timeout). It does not wait: Leader tells.
func (g *Group) TransferLeadership(to uint64) error {
	if g.closed.Load() {
		return ErrClosed
	}
	select {
	case g.xferc <- to:
	default: // one is pending; the caller asks again if it must
	}
	return nil
}

// Quiesced reports whether the group stopped ticking (idle, all caught up).
func (g *Group) Quiesced() bool { return g.quiesced.Load() }

// tick asks the loop for one raft tick; ticks that pile up coalesce.
func (g *Group) tick() {
	select {
	case g.tickc <- struct{}{}:
	default:
	}
}

// poke tells the loop that a peer's liveness changed.
func (g *Group) poke() {
	select {
	case g.pokec <- struct{}{}:
	default:
	}
}

// deliver hands a peer's message to the loop; when the loop is behind the
// message is dropped (raft retransmits) rather than stalling the connection.
func (g *Group) deliver(m inMsg) bool {
	select {
	case g.recvc <- m:
		return true
	default:
		return false
	}
}

func (g *Group) start() { go g.run() }

// stop ends the loop and closes the store. Idempotent.
func (g *Group) stop() error {
	g.stopOnce.Do(func() {
		g.closed.Store(true)
		close(g.stopc)
		<-g.donec
		g.failAll(ErrClosed)
		g.stopErr = g.store.Close()
	})
	return g.stopErr
}

func (g *Group) run() {
	defer close(g.donec)
	for {
		ticked := false
		select {
		case <-g.stopc:
			return
		case <-g.tickc:
			g.rn.Tick()
			ticked = true
		case <-g.pokec:
			g.onLiveness()
		case r := <-g.snapc:
			g.snapDone(r)
		case to := <-g.xferc:
			g.wake(false)
			g.rn.TransferLeader(to)
		case f := <-g.callc:
			f()
			if g.retired {
				return // RetireGroup: nothing more is stepped or acknowledged
			}
		case m := <-g.recvc:
			g.step(m)
			for i := 0; i < batchMax; i++ {
				select {
				case m := <-g.recvc:
					g.step(m)
					continue
				default:
				}
				break
			}
		case p := <-g.propc:
			g.propose(p)
			for i := 0; i < batchMax; i++ {
				select {
				case p := <-g.propc:
					g.propose(p)
					continue
				default:
				}
				break
			}
		}
		if err := g.handleReady(); err != nil {
			g.err = err
			g.log.Error("replica: group stopped", "err", err)
			g.closed.Store(true)
			g.failAll(err)
			return
		}
		if ticked {
			g.maybeQuiesce()
			g.noteLag()
		}
	}
}

func (g *Group) step(in inMsg) {
	m := in.m
	if g.quiesced.Load() && !in.quiesce && !(m.GetType() == pb.MsgHeartbeatResp && g.lead == g.node) {
		g.wake(false)
	}
	if err := g.rn.Step(m); err != nil {
		g.log.Debug("replica: step", "type", m.GetType().String(), "from", m.GetFrom(), "err", err)
		return
	}
	g.heard(m)
	if in.quiesce {
		g.followerQuiesce(m)
	}
}

// handleReady runs the Ready discipline until nothing is pending: persist
// (snapshot, entries, HardState; one write, fsync per policy), then send,
// then apply committed entries, then Advance.
func (g *Group) handleReady() error {
	for g.rn.HasReady() {
		rd := g.rn.Ready()
		if rd.SoftState != nil {
			if rd.SoftState.Lead == g.node && g.lead != g.node {
				g.confSeen = nil // a new leader's learners get a snapshot that names them (snapshotForLearners)
			}
			g.lead = rd.SoftState.Lead
			g.leadAtom.Store(g.lead)
			g.roleAtom.Store(uint32(rd.SoftState.RaftState))
		}
		installed := false
		if snap := rd.Snapshot; snap != nil && !raft.IsEmptySnap(snap) {
			if fs, ok := g.sm.(FileState); ok {
				var err error
				if installed, err = g.installSnapshot(fs, snap); err != nil {
					return err
				}
			}
		}
		if err := g.store.Save(rd.HardState, rd.Entries, rd.Snapshot, rd.MustSync); err != nil {
			return err
		}
		if rd.HardState != nil {
			g.termAtom.Store(rd.HardState.GetTerm())
			g.noteCommit(rd.HardState.GetCommit())
		}
		for _, e := range rd.Entries {
			if d := e.GetData(); len(d) >= proposalHeader && binary.BigEndian.Uint64(d[0:8]) == g.node {
				g.byIndex[e.GetIndex()] = binary.BigEndian.Uint64(d[8:16])
			}
		}
		if snap := rd.Snapshot; snap != nil && !raft.IsEmptySnap(snap) {
			if !installed {
				if err := g.sm.Restore(snap.GetData()); err != nil {
					return fmt.Errorf("replica: restore snapshot %d: %w", snap.GetMetadata().GetIndex(), err)
				}
			}
			g.applied = snap.GetMetadata().GetIndex()
			g.confState = proto.Clone(snap.GetMetadata().GetConfState()).(*pb.ConfState)
			g.confNext = g.applied
			for i := range g.byIndex {
				if i <= g.applied {
					g.finish(g.byIndex[i], ErrLost)
					delete(g.byIndex, i)
				}
			}
		}
		msgs := rd.Messages
		if fs, ok := g.sm.(FileState); ok {
			msgs = g.takeSnapshots(fs, msgs)
		}
		reports := g.h.sendMessages(g.id, msgs)
		if err := g.apply(rd.CommittedEntries); err != nil {
			return err
		}
		g.rn.Advance(rd)
		g.confAtom.Store(g.confState)
		g.confIdx.Store(g.confNext) // after confAtom: see ConfIndex
		for _, r := range reports {
			if r.snap {
				g.rn.ReportSnapshot(r.to, r.status)
			} else {
				g.rn.ReportUnreachable(r.to)
			}
		}
		g.applAtom.Store(g.applied)
		if err := g.maybeSnapshot(); err != nil {
			return err
		}
		if g.confState != g.confSeen { // a configuration change was applied
			g.confSeen = g.confState
			if err := g.snapshotForLearners(); err != nil {
				return err
			}
		}
	}
	return nil
}
