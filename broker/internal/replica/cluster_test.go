package replica

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"berth.dev/broker/internal/wal"
)

// listSM is a state machine that keeps every applied entry's data, in order.
type listSM struct {
	mu       sync.Mutex
	entries  []string
	last     uint64
	restores atomic.Int64
}

func (s *listSM) Apply(index uint64, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if index <= s.last {
		return fmt.Errorf("apply %d after %d", index, s.last)
	}
	s.entries = append(s.entries, string(data))
	s.last = index
	return nil
}

type listSnap struct {
	Entries []string
	Last    uint64
}

func (s *listSM) Snapshot() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return json.Marshal(listSnap{s.entries, s.last})
}

func (s *listSM) Restore(data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.restores.Add(1)
	var v listSnap
	if len(data) > 0 {
		if err := json.Unmarshal(data, &v); err != nil {
			return err
		}
	}
	s.entries, s.last = v.Entries, v.Last
	return nil
}

func (s *listSM) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.entries)
}

func (s *listSM) has(v string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.entries, v)
}

const testGroup = 7

// cluster is n Hosts on loopback in this process, each a member of one group
// (or of groups, for the idle measurement).
type cluster struct {
	t      *testing.T
	n      int
	secret []byte
	tune   func(*Config)
	dirs   map[uint64]string
	addrs  map[uint64]string
	hosts  map[uint64]*Host
	sms    map[uint64]*listSM
	mu     sync.Mutex
}

func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("REPLICA_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func newCluster(t *testing.T, n int, tune func(*Config)) *cluster {
	t.Helper()
	c := &cluster{
		t: t, n: n, secret: []byte("berth-test-cluster-secret-0123456789"), tune: tune,
		dirs: map[uint64]string{}, addrs: map[uint64]string{}, hosts: map[uint64]*Host{}, sms: map[uint64]*listSM{},
	}
	for id := uint64(1); id <= uint64(n); id++ {
		c.dirs[id] = t.TempDir()
		c.addrs[id] = "127.0.0.1:0"
	}
	for id := uint64(1); id <= uint64(n); id++ {
		c.hosts[id] = c.newHost(id)
		c.addrs[id] = c.hosts[id].Addr()
	}
	for id := uint64(1); id <= uint64(n); id++ {
		c.wire(id)
		c.openGroup(id)
	}
	t.Cleanup(func() {
		for _, id := range c.live() {
			c.kill(id)
		}
	})
	return c
}

func (c *cluster) config(id uint64) Config {
	cfg := Config{
		NodeID: id, Listen: c.addrs[id], Secret: c.secret, Dir: c.dirs[id], Fsync: wal.SyncAlways,
		TickInterval: 20 * time.Millisecond, ElectionTick: 10, HeartbeatTick: 1, Quiesce: true,
		Logger: testLogger(c.t),
	}
	if c.tune != nil {
		c.tune(&cfg)
	}
	return cfg
}

func (c *cluster) newHost(id uint64) *Host {
	c.t.Helper()
	h, err := New(c.config(id))
	if err != nil {
		c.t.Fatalf("node %d: %v", id, err)
	}
	return h
}

func (c *cluster) wire(id uint64) {
	h := c.host(id)
	for p := uint64(1); p <= uint64(c.n); p++ {
		if p != id {
			h.AddPeer(p, c.addrs[p])
		}
	}
}

func (c *cluster) voters() []uint64 {
	var v []uint64
	for id := uint64(1); id <= uint64(c.n); id++ {
		v = append(v, id)
	}
	return v
}

func (c *cluster) openGroup(id uint64) {
	c.t.Helper()
	sm := &listSM{}
	if _, err := c.host(id).OpenGroup(testGroup, c.voters(), sm); err != nil {
		c.t.Fatalf("node %d: open group: %v", id, err)
	}
	c.mu.Lock()
	c.sms[id] = sm
	c.mu.Unlock()
}

// kill closes a node's transport and log at once: to its peers it is a node
// that died.
func (c *cluster) kill(id uint64) {
	c.t.Helper()
	c.mu.Lock()
	h := c.hosts[id]
	delete(c.hosts, id)
	c.mu.Unlock()
	if err := h.Close(); err != nil {
		c.t.Errorf("close node %d: %v", id, err)
	}
}

// restart brings a killed node back on its address and data directory.
func (c *cluster) restart(id uint64) {
	c.t.Helper()
	h := c.newHost(id)
	c.mu.Lock()
	c.hosts[id] = h
	c.mu.Unlock()
	c.wire(id)
	c.openGroup(id)
}

func (c *cluster) host(id uint64) *Host {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hosts[id]
}

// live is the ids of the nodes running, in order.
func (c *cluster) live() []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(maps.Keys(c.hosts))
}

func (c *cluster) sm(id uint64) *listSM {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sms[id]
}

// group is node id's group, nil when the node is down.
func (c *cluster) group(id uint64) *Group {
	h := c.host(id)
	if h == nil {
		return nil
	}
	return h.Group(testGroup)
}

// leader waits until one live node leads and the other live nodes follow it.
func (c *cluster) leader(timeout time.Duration) uint64 {
	c.t.Helper()
	var lead uint64
	waitFor(c.t, timeout, "a leader all live nodes agree on", func() bool {
		lead = 0
		for _, id := range c.live() {
			g := c.group(id)
			if g == nil {
				return false
			}
			l := g.Leader()
			if l == 0 || (lead != 0 && l != lead) || c.host(l) == nil {
				return false
			}
			lead = l
		}
		return lead != 0
	})
	return lead
}

func (c *cluster) propose(id uint64, data string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	g := c.group(id)
	if g == nil {
		return ErrClosed
	}
	return g.Propose(ctx, []byte(data))
}

// isRetryable is an error a client retries on another node.
func isRetryable(err error) bool {
	return errors.Is(err, ErrNotLeader) || errors.Is(err, ErrLost) || errors.Is(err, ErrClosed) ||
		errors.Is(err, context.DeadlineExceeded)
}
