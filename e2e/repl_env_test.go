package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"berth.dev/e2e/internal/stack"
)

// The replication cases (fault_repl_test.go, go test -run TestReplication;
// docs/replication.md): three node processes replicating every tenant
// through its own Raft group, one gateway, the fault load of
// fault_load_test.go through it. Each case logs a FAULT line.

// replCycles is how many leaders TestReplicationLeaderKilledUnderQoS1Load
// kills: 3 in `make test`, BERTH_REPL_CYCLES when set (`make fault-repl`
// runs 10).
func replCycles(t *testing.T) int {
	t.Helper()
	v := os.Getenv("BERTH_REPL_CYCLES")
	if v == "" {
		return 3
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("BERTH_REPL_CYCLES=%q: want a positive number", v)
	}
	return n
}

// replEnv is a three-node replicating stack with an account on the pro
// plan (rates above the load's) and a device credential for topic.
type replEnv struct {
	s    *stack.Stack
	a    stack.Account
	cred stack.Credential
}

func newReplEnv(t *testing.T) *replEnv {
	t.Helper()
	s := stack.New(t, bins, stack.Options{Nodes: 3, OpenPlans: "free,pro"})
	a := s.Signup(t)
	roomForLoad(t, s, a)
	return &replEnv{s: s, a: a, cred: s.CreateCredential(t, a, []string{"repl/#"}, []string{"repl/#"}, nil)}
}

func (e *replEnv) load(t *testing.T, topic string) *faultLoad {
	return newFaultLoad(t, []string{e.s.Gateways[0].MQTT}, e.cred, topic)
}

// placement is GET /v1/tenants/{tid}'s "placement": the leading node's id
// ("" when none) and the epoch (0 when no row).
func (e *replEnv) placement(t *testing.T) (string, int64) {
	t.Helper()
	var out struct {
		Placement *struct {
			Leader *string `json:"leader"`
			Epoch  int64   `json:"epoch"`
		} `json:"placement"`
	}
	if code := e.s.Do(t, "GET", "/v1/tenants/"+e.a.Tenant.ID, e.a.APIKey, nil, &out); code != http.StatusOK {
		t.Fatalf("GET tenant: status %d", code)
	}
	if out.Placement == nil || out.Placement.Leader == nil {
		if out.Placement != nil {
			return "", out.Placement.Epoch
		}
		return "", 0
	}
	return *out.Placement.Leader, out.Placement.Epoch
}

// waitLeader waits until the placement names a running node at an epoch
// above above, and returns it.
func (e *replEnv) waitLeader(t *testing.T, above int64, within time.Duration) (*stack.ClusterNode, int64) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		id, epoch := e.placement(t)
		if n := e.s.ClusterNode(id); n != nil && epoch > above && !n.Exited() {
			return n, epoch
		}
		if time.Now().After(deadline) {
			t.Fatalf("no leader at an epoch above %d after %v (placement: %q at %d)", above, within, id, epoch)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// moveLeadership makes to lead the tenant: the other nodes but the leader
// are stopped (SIGSTOP) so that to is the only voter a drain of the leader
// can hand the leadership to, the leader is drained, and everything is
// undone. (Draining two nodes at once is not a way: each may hand the
// leadership to the other.) It returns the epoch to leads at.
func (e *replEnv) moveLeadership(t *testing.T, to *stack.ClusterNode) int64 {
	t.Helper()
	lead, epoch := e.waitLeader(t, 0, 30*time.Second)
	if lead == to {
		return epoch
	}
	var paused []*stack.ClusterNode
	for _, n := range e.s.Cluster {
		if n != lead && n != to && !n.Exited() {
			n.Signal(t, syscall.SIGSTOP)
			paused = append(paused, n)
		}
	}
	defer func() {
		for _, n := range paused {
			n.Signal(t, syscall.SIGCONT)
		}
	}()
	if code, body := lead.Drain(t, e.s.NodeToken, 20*time.Second); code != http.StatusOK {
		t.Fatalf("drain %s: %d %s", lead.ID, code, body)
	}
	defer func() {
		if code := lead.Undrain(t, e.s.NodeToken); code/100 != 2 {
			t.Errorf("DELETE /admin/drain on %s: %d", lead.ID, code)
		}
	}()
	next, epoch := e.waitLeader(t, epoch, 30*time.Second)
	if next != to {
		t.Fatalf("leadership at %s, not %s, after draining %s", next.ID, to.ID, lead.ID)
	}
	return epoch
}

// Park subscribes a persistent session (expiry 600 s) and leaves: what is
// published from now on waits in the session until Resume.
func (l *faultLoad) Park(id string) {
	l.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for try := 0; ; try++ {
		if time.Now().After(deadline) {
			l.t.Fatalf("session %s not subscribed within 20 s: %v", id, l.lastErr.Load())
		}
		cl, _ := l.dial(try, id, true, nil)
		if cl == nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		sa, err := cl.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: l.topic + "/#", QoS: 1}}})
		cancel()
		_ = cl.Disconnect(&paho.Disconnect{})
		if err == nil && sa.Reasons[0] < 0x80 {
			return
		}
		l.lastErr.Store(fmt.Sprintf("subscribe: %v %v", sa, err))
	}
}

// Idle keeps a client connected (clean start, nothing subscribed),
// reconnecting by itself, until Stop: one more device a drain moves.
func (l *faultLoad) Idle(id string) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for try := 0; ; try++ {
			cl, _ := l.dial(try, id, true, nil)
			if cl == nil {
				select {
				case <-l.stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				continue
			}
			select {
			case <-cl.Done():
				if l.onDrop != nil {
					l.onDrop(time.Now())
				}
			case <-l.stop:
				_ = cl.Disconnect(&paho.Disconnect{})
				return
			}
		}
	}()
}

// ackWatch records the PUBACKs around a fault at a moment (mark): the
// first on a connection accepted after it (so from a node that was not
// the faulty one, when the fault stops that node), and those on
// connections accepted before it.
type ackWatch struct {
	mu         sync.Mutex
	at         time.Time // the fault; zero until mark
	first      time.Time // first PUBACK on a connection accepted after at
	oldAfter   int       // PUBACKs on connections from before at, after first
	oldBetween int       // PUBACKs on connections from before at, between at and first
}

func (w *ackWatch) mark() {
	w.mu.Lock()
	w.at, w.first, w.oldAfter, w.oldBetween = time.Now(), time.Time{}, 0, 0
	w.mu.Unlock()
}

func (w *ackWatch) onAck(connected, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.at.IsZero():
	case connected.After(w.at):
		if w.first.IsZero() {
			w.first = at
		}
	case w.first.IsZero():
		w.oldBetween++
	case at.After(w.first):
		w.oldAfter++
	}
}

// waitFirst waits for the first PUBACK on a connection accepted after
// the mark and returns how long after the mark it came.
func (w *ackWatch) waitFirst(t *testing.T, within time.Duration) time.Duration {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		w.mu.Lock()
		at, first := w.at, w.first
		w.mu.Unlock()
		if !first.IsZero() {
			return first.Sub(at)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no PUBACK on a new connection within %v of the fault", within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
