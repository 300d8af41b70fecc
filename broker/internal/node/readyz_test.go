package node

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// getReadyz calls GET /readyz on n without a token.
func getReadyz(t *testing.T, n *testNode) (int, readyReport, string) {
	t.Helper()
	resp, err := http.Get("http://" + n.AdminAddr().String() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var rep readyReport
	if err := json.Unmarshal(body, &rep); err != nil {
		t.Fatalf("readyz body %q: %v", body, err)
	}
	return resp.StatusCode, rep, string(body)
}

// gate is a TCP relay on 127.0.0.1 in front of one node's peer listener:
// the other nodes dial the gate, not the node. Held, it relays nothing:
// relayed connections are cut and new ones wait until release. It stands
// for a network that does not (yet) carry the leader's messages to a node.
type gate struct {
	t  *testing.T
	ln net.Listener

	mu      sync.Mutex
	target  string
	held    chan struct{} // non-nil while held; closed on release
	conns   map[net.Conn]bool
	stopped bool
	stop    chan struct{}
	wg      sync.WaitGroup
}

func newGate(t *testing.T) *gate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{t: t, ln: ln, conns: map[net.Conn]bool{}, stop: make(chan struct{})}
	g.wg.Add(1)
	go g.accept()
	t.Cleanup(g.close)
	return g
}

func (g *gate) addr() string { return g.ln.Addr().String() }

func (g *gate) setTarget(addr string) {
	g.mu.Lock()
	g.target = addr
	g.mu.Unlock()
}

func (g *gate) accept() {
	defer g.wg.Done()
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return
		}
		g.wg.Add(1)
		go g.relay(c)
	}
}

// track adds (or removes) a connection the gate must cut on hold and close.
func (g *gate) track(c net.Conn, on bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if on && g.stopped {
		return false
	}
	if on {
		g.conns[c] = true
	} else {
		delete(g.conns, c)
	}
	return true
}

func (g *gate) relay(in net.Conn) {
	defer g.wg.Done()
	defer in.Close()
	for {
		g.mu.Lock()
		held, target := g.held, g.target
		g.mu.Unlock()
		if held == nil {
			if !g.track(in, true) {
				return
			}
			defer g.track(in, false)
			out, err := net.DialTimeout("tcp", target, 5*time.Second)
			if err != nil {
				return
			}
			defer out.Close()
			if !g.track(out, true) {
				return
			}
			defer g.track(out, false)
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
			go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
			<-done // one side ended: end both
			in.Close()
			out.Close()
			<-done
			return
		}
		select {
		case <-held:
		case <-g.stop:
			return
		}
	}
}

// hold cuts every relayed connection and holds new ones.
func (g *gate) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held == nil {
		g.held = make(chan struct{})
	}
	for c := range g.conns {
		c.Close()
	}
}

// release relays again, the held connections first.
func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held != nil {
		close(g.held)
		g.held = nil
	}
}

func (g *gate) close() {
	g.ln.Close()
	g.mu.Lock()
	if !g.stopped {
		g.stopped = true
		close(g.stop)
	}
	for c := range g.conns {
		c.Close()
	}
	g.mu.Unlock()
	g.wg.Wait()
}

// gated returns a cluster option putting a gate in front of every node's
// peer listener (by node id; startCluster's ids).
func gated(t *testing.T) (map[string]*gate, func(*Config)) {
	gates := map[string]*gate{}
	for _, id := range []string{"node-r1", "node-r2", "node-r3"} {
		gates[id] = newGate(t)
	}
	return gates, func(cfg *Config) {
		gates[cfg.ID].setTarget(cfg.PeerListen)
		for i, p := range cfg.Peers {
			cfg.Peers[i].Addr = gates[p.ID].addr()
		}
	}
}

// TestReadyzWaitsForCatchUp: a follower is stopped while the leader takes
// 200 QoS 1 messages, then restarted on its data directory while no peer
// message can reach it: /readyz answers 503 (its tenant group not caught
// up) and keeps no tenant id in the answer. Once the network carries the
// leader's messages again it catches up, and /readyz answers 200 only
// when it has applied all but readyMaxLag of what the leader committed.
func TestReadyzWaitsForCatchUp(t *testing.T) {
	t.Parallel()
	gates, viaGates := gated(t)
	c := startCluster(t, viaGates)
	const tenant = replTenant
	lead := c.leader(t, tenant, nil)
	for _, n := range c.nodes {
		poll(t, 15*time.Second, n.cfg.ID+" ready", func() bool {
			code, _, _ := getReadyz(t, n)
			return code == http.StatusOK
		})
		if _, rep, _ := getReadyz(t, n); !rep.Ready || rep.Groups != 1 || rep.NotCaughtUp != 0 {
			t.Fatalf("%s: %+v, want ready with 1 group caught up", n.cfg.ID, rep)
		}
	}
	var behind *testNode
	for _, n := range c.nodes {
		if n != lead {
			behind = n
			break
		}
	}
	bi := c.index(behind)
	behind.kill(t)

	cr := cred{tenant: tenant, id: "cred_ready", acl: allowAll}
	pub := lead.mqtt5(t, cr, "pub", nil)
	const total = 200
	for i := range total {
		if r := publish(t, pub, "ready/x", fmt.Sprintf("m%04d", i)); r >= 0x80 {
			t.Fatalf("PUBACK %d: %#x", i, r)
		}
	}
	target := lead.groupOf(t, tenant).g.Applied()

	gates[behind.cfg.ID].hold()
	back := c.restart(t, bi)
	bg := back.groupOf(t, tenant).g
	code, rep, body := getReadyz(t, back)
	if code != http.StatusServiceUnavailable || rep.Ready || rep.Groups != 1 || rep.NotCaughtUp != 1 {
		t.Fatalf("restarted follower cut off from its leader: %d %s, want 503 with 1 of 1 group not caught up", code, body)
	}
	if strings.Contains(body, tenant) {
		t.Fatalf("/readyz names a tenant: %s", body)
	}
	t.Logf("cut off: %d %s (applied %d, leader at %d)", code, strings.TrimSpace(body), bg.Applied(), target)
	if bg.Applied()+readyMaxLag >= target {
		t.Fatalf("the restarted follower is at %d, the leader at %d: not far enough behind to test readiness", bg.Applied(), target)
	}

	start := time.Now()
	gates[behind.cfg.ID].release()
	var notReady int
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, rep, body = getReadyz(t, back)
		if code == http.StatusOK {
			break
		}
		if code != http.StatusServiceUnavailable || rep.NotCaughtUp != 1 {
			t.Fatalf("while catching up: %d %s", code, body)
		}
		notReady++
		if time.Now().After(deadline) {
			t.Fatalf("not ready within 20s: %s (applied %d, leader at %d)", body, bg.Applied(), target)
		}
		time.Sleep(5 * time.Millisecond)
	}
	applied := bg.Applied()
	if applied+readyMaxLag < target {
		t.Fatalf("ready at applied %d, the leader committed %d: more than %d behind", applied, target, readyMaxLag)
	}
	if !rep.Ready || rep.NotCaughtUp != 0 || rep.MaxLag > readyMaxLag {
		t.Fatalf("ready answer %s", body)
	}
	t.Logf("ready %v after the network came back (%d answers 503 before), applied %d of %d", time.Since(start).Round(time.Millisecond), notReady, applied, target)
	poll(t, 10*time.Second, "the follower applied everything", func() bool { return bg.Applied() >= target })
}

// TestReadyzWithoutReplication: a node without -peers is ready once it
// serves; the probe needs no token.
func TestReadyzWithoutReplication(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	code, rep, body := getReadyz(t, n)
	if code != http.StatusOK || !rep.Ready || rep.NodeID != n.cfg.ID || rep.Groups != 0 {
		t.Fatalf("readyz: %d %s", code, body)
	}
}
