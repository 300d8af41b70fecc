package replica

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"berth.dev/broker/internal/wal"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Config configures a Host. Zero fields take the defaults of withDefaults.
type Config struct {
	NodeID uint64 // this node's raft id, never 0, unique in the cluster, new whenever the node lost its raft state
	// PeerID is this node's id on the peer transport (what the other
	// nodes pass to AddPeer): stable across the node's raft ids; default
	// NodeID. Peers learn a node's current raft id from its liveness
	// frames (identity.go).
	PeerID uint64
	Listen string // peer transport address, e.g. ":7881"
	Secret []byte // cluster secret for the peer HMAC, at least 16 bytes
	Dir    string // groups live in Dir/<group id>

	Fsync         wal.Policy    // default always: a node acknowledges an append only once it is fsynced
	SegmentBytes  int64         // raft log segment size; default 8 MiB
	TickInterval  time.Duration // raft tick; default 100ms
	ElectionTick  int           // ticks; default 10 (election timeout 1–2 s)
	HeartbeatTick int           // ticks; default 1
	// Liveness is how long a peer may send nothing, while this node runs
	// (its own stalls do not count: liveness.go), before it is taken for
	// dead; default ElectionTick × TickInterval.
	Liveness        time.Duration
	Quiesce         bool   // idle groups stop ticking (see quiesce.go)
	SnapshotEntries uint64 // compact every this many applied entries; default 10000
	CatchUpEntries  uint64 // entries kept before a snapshot for lagging followers; default 5000
	QueueLen        int    // frames queued per peer; default 4096
	// QueueBytes bounds the payload bytes queued per peer; default 64 MiB.
	// Past it (or QueueLen) frames are dropped and the peer reported
	// unreachable to raft, which probes it again.
	QueueBytes int64
	// MaxLogBytes bounds the raft entries a group holds in memory: past
	// it the group snapshots (compacts) even before SnapshotEntries, and
	// keeps at most half of it for followers a little behind; default
	// 64 MiB.
	MaxLogBytes int64
	Logger      *slog.Logger

	hooks hooks // tests only (liveness.go)
}

func (c Config) withDefaults() Config {
	if c.SegmentBytes == 0 {
		c.SegmentBytes = 8 << 20
	}
	if c.TickInterval == 0 {
		c.TickInterval = 100 * time.Millisecond
	}
	if c.ElectionTick == 0 {
		c.ElectionTick = 10
	}
	if c.HeartbeatTick == 0 {
		c.HeartbeatTick = 1
	}
	if c.Liveness == 0 {
		c.Liveness = time.Duration(c.ElectionTick) * c.TickInterval
	}
	if c.SnapshotEntries == 0 {
		c.SnapshotEntries = 10000
	}
	if c.CatchUpEntries == 0 {
		c.CatchUpEntries = 5000
	}
	if c.QueueLen == 0 {
		c.QueueLen = 4096
	}
	if c.QueueBytes == 0 {
		c.QueueBytes = 64 << 20
	}
	if c.MaxLogBytes == 0 {
		c.MaxLogBytes = 64 << 20
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.PeerID == 0 {
		c.PeerID = c.NodeID
	}
	return c
}

// Validate reports every problem with c (after defaults).
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.NodeID == 0 {
		errs = append(errs, errors.New("replica: NodeID must not be 0"))
	}
	if c.Dir == "" {
		errs = append(errs, errors.New("replica: Dir is required"))
	}
	if len(c.Secret) < 16 {
		errs = append(errs, errors.New("replica: Secret must be at least 16 bytes"))
	}
	if c.HeartbeatTick >= c.ElectionTick {
		errs = append(errs, errors.New("replica: HeartbeatTick must be below ElectionTick"))
	}
	return errors.Join(errs...)
}

// Host is a node's side of replication: the peer transport, the groups this
// node is a member of, one ticker for all of them and node liveness.
// New → AddPeer/OpenGroup → Close.
type Host struct {
	cfg Config
	log *slog.Logger
	tr  *Transport

	mu     sync.Mutex
	groups map[uint64]*Group
	seen   map[uint64]*atomic.Int64 // peer → clock() of its last frame, stalls credited (liveness.go)
	live   map[uint64]bool          // liveness as the ticker last judged it
	ids    peerIDs                  // peers' current raft ids (identity.go)
	asked  map[uint64]struct{}      // groups not open a leader sent to (removal.go)
	closed bool

	stop chan struct{}
	done chan struct{}
	born time.Time // clock()'s origin

	unknownGroup atomic.Uint64

	snapshotsSent, snapshotsReceived, snapshotsInstalled atomic.Uint64
}

// New listens for peers and starts the ticker.
func New(cfg Config) (*Host, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	h := &Host{
		cfg: cfg, log: cfg.Logger.With("node", cfg.NodeID), groups: map[uint64]*Group{},
		seen: map[uint64]*atomic.Int64{}, live: map[uint64]bool{},
		stop: make(chan struct{}), done: make(chan struct{}), born: time.Now(),
	}
	h.ids.init(cfg.NodeID)
	tr, err := newTransport(cfg.PeerID, cfg.Listen, cfg.Secret, cfg.QueueLen, cfg.QueueBytes, h.log, h)
	if err != nil {
		return nil, err
	}
	h.tr = tr
	tr.start()
	go h.tickLoop()
	return h, nil
}

// Addr is the peer transport's listening address.
func (h *Host) Addr() string { return h.tr.Addr() }

// Stats returns the peer transport's counters and the snapshot streams'.
func (h *Host) Stats() TransportStats {
	s := h.tr.Stats()
	s.SnapshotsSent, s.SnapshotsReceived, s.SnapshotsInstalled = h.snapshotsSent.Load(), h.snapshotsReceived.Load(), h.snapshotsInstalled.Load()
	return s
}

// Partition cuts this node off from peers, both ways as this node sees
// it (nothing sent to them, nothing they send taken); none heals. Fault
// injection for tests and drills: the partition is complete only when the
// peers cut this node off too.
func (h *Host) Partition(peers ...uint64) { h.tr.partition(peers...) }

// AddPeer makes a node reachable at addr: id is its transport id (its
// Config.PeerID). Call it for every other node. Its raft id is learned
// from its liveness frames (identity.go).
func (h *Host) AddPeer(id uint64, addr string) {
	h.mu.Lock()
	if h.seen[id] == nil && id != h.cfg.PeerID {
		h.seen[id] = new(atomic.Int64)
	}
	hello := h.ids.hello
	h.mu.Unlock()
	h.tr.addPeer(id, addr)
	h.tr.send(id, kindAlive, 0, hello) // announce this node's raft id at once
}

func (h *Host) groupDir(id uint64) string {
	return filepath.Join(h.cfg.Dir, strconv.FormatUint(id, 10))
}

// OpenGroup opens (or creates, with voters as its first configuration) the
// group id with its state machine, and starts it. voters is ignored when the
// group already has a log on disk.
func (h *Host) OpenGroup(id uint64, voters []uint64, sm StateMachine) (*Group, error) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, ErrClosed
	}
	if h.groups[id] != nil {
		h.mu.Unlock()
		return nil, fmt.Errorf("replica: group %d is open", id)
	}
	h.mu.Unlock()
	removeUnfinished(inDir(h.groupDir(id))) // streams a crash cut short
	g, err := newGroup(h, id, voters, sm)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.groups[id] = g
	h.mu.Unlock()
	g.start()
	return g, nil
}

// HasLog reports whether group id has a raft log on this node's disk
// (OpenGroup then takes its configuration from it, not from voters).
func (h *Host) HasLog(id uint64) bool {
	_, err := os.Stat(filepath.Join(h.groupDir(id), "log"))
	return err == nil
}

// Group returns an open group, or nil.
func (h *Host) Group(id uint64) *Group {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.groups[id]
}

// Close stops the ticker, closes the transport (every connection at once),
// stops every group and closes its log. Idempotent.
func (h *Host) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	close(h.stop)
	h.mu.Unlock()
	<-h.done
	h.tr.close()
	h.mu.Lock()
	gs := h.groups
	h.groups = map[uint64]*Group{}
	h.mu.Unlock()
	var errs []error
	for _, g := range gs {
		errs = append(errs, g.stop())
	}
	return errors.Join(errs...)
}

// Alive reports whether a peer sent anything within the liveness window,
// as of the last tick (this node: true).
func (h *Host) Alive(id uint64) bool { return h.alive(id) }

// alive reports whether the node whose raft id is id sent anything within
// the liveness window, as of the last tick: false for a raft id no peer
// announces (now). This node is always alive.
func (h *Host) alive(id uint64) bool {
	if id == h.cfg.NodeID {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	key, ok := h.ids.peerOf[id]
	return ok && h.live[key]
}

func (h *Host) tickLoop() {
	defer close(h.done)
	t := time.NewTicker(h.cfg.TickInterval)
	defer t.Stop()
	var gs []*Group
	last := h.clock()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		if h.cfg.hooks.tick != nil {
			h.cfg.hooks.tick()
		}
		now := h.clock()
		stall := stallOf(time.Duration(now-last), h.cfg.TickInterval)
		last = now
		h.mu.Lock()
		changed := h.judgeLivenessLocked(now, stall)
		gs = gs[:0]
		for _, g := range h.groups {
			gs = append(gs, g)
		}
		h.mu.Unlock()
		for _, g := range gs {
			if changed {
				g.poke()
			}
			if !g.quiesced.Load() {
				g.tick()
			}
		}
	}
}

// handleFrame is the transport's handler: liveness for every frame, raft
// messages to their group after checking they come from the authenticated
// peer and are addressed to this node.
func (h *Host) handleFrame(cs *connState, from uint64, kind byte, group uint64, payload []byte) {
	if h.cfg.hooks.frame != nil {
		h.cfg.hooks.frame()
	}
	h.mu.Lock()
	s := h.seen[from]
	var g *Group
	if kind != kindAlive {
		g = h.groups[group]
	}
	fromRaft := h.ids.raftOf[from] // 0 until its liveness frame says
	h.mu.Unlock()
	if s != nil {
		s.Store(h.clock())
	}
	if kind == kindAlive {
		h.learnRaftID(from, payload)
		return
	}
	if kind != kindRaft && kind != kindQuiesce && kind != kindSnapBegin && kind != kindSnapChunk && kind != kindSnapEnd {
		h.tr.badMessages.Add(1)
		return
	}
	if g == nil {
		h.unknownGroup.Add(1)
		h.noteAsked(kind, group, payload) // removal.go
		return
	}
	if kind >= kindSnapBegin {
		h.receiveSnapshot(cs, fromRaft, kind, g, payload)
		return
	}
	m := new(pb.Message)
	if err := proto.Unmarshal(payload, m); err != nil || m.GetFrom() != fromRaft || m.GetTo() != h.cfg.NodeID ||
		raft.IsLocalMsg(m.GetType()) || (kind == kindQuiesce && m.GetType() != pb.MsgHeartbeat) {
		h.tr.badMessages.Add(1)
		h.log.Warn("replica: peer message refused", "peer", from, "group", group, "type", m.GetType().String())
		return
	}
	g.deliver(inMsg{m: m, quiesce: kind == kindQuiesce})
}

type sendReport struct {
	to     uint64
	snap   bool
	status raft.SnapshotStatus
}

// sendMessages queues a Ready's messages; it returns what raft must be told
// after Advance (snapshots sent or not, peers unreachable).
func (h *Host) sendMessages(group uint64, msgs []*pb.Message) []sendReport {
	var reports []sendReport
	for _, m := range msgs {
		ok := h.tr.sendMsg(h.peerKey(m.GetTo()), kindRaft, group, m)
		switch {
		case m.GetType() == pb.MsgSnap && ok:
			reports = append(reports, sendReport{to: m.GetTo(), snap: true, status: raft.SnapshotFinish})
		case m.GetType() == pb.MsgSnap:
			reports = append(reports, sendReport{to: m.GetTo(), snap: true, status: raft.SnapshotFailure})
		case !ok:
			reports = append(reports, sendReport{to: m.GetTo()})
		}
	}
	return reports
}

func (h *Host) sendQuiesce(group uint64, m *pb.Message) {
	h.tr.sendMsg(h.peerKey(m.GetTo()), kindQuiesce, group, m)
}
