package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// Helpers of the rebalance tests (rebalance_test.go): the cluster's state
// as the groups' leaders see it, the admin calls, and the devices whose
// moves are counted.

// servedBy is the node serving tenant, nil if none does.
func (c *cluster) servedBy(tenant string) *testNode {
	for _, n := range c.nodes {
		if _, err := n.repl.serving(tenant); err == nil {
			return n
		}
	}
	return nil
}

// node is the cluster's node with node id id.
func (c *cluster) node(id string) *testNode {
	for _, n := range c.nodes {
		if n.cfg.ID == id {
			return n
		}
	}
	return nil
}

// groupState is a group as its leader sees it: what a rebalance changes.
type groupState struct {
	leader, term uint64
	voters       []uint64
}

func (c *cluster) states(t *testing.T) map[string]groupState {
	t.Helper()
	out := map[string]groupState{}
	for id := range rebalanceTenants {
		lead := c.servedBy(id)
		if lead == nil {
			t.Fatalf("%s served by no node", id)
		}
		g := lead.groupOf(t, id).g
		v := g.Members().Voters
		slices.Sort(v)
		out[id] = groupState{leader: g.Leader(), term: g.Term(), voters: v}
	}
	return out
}

// moveBegun reports whether a group's leader or voters differ from
// before, or a group has a learner (safe off the test's goroutine).
func (c *cluster) moveBegun(before map[string]groupState) bool {
	for _, n := range c.nodes {
		n.repl.mu.Lock()
		groups := make([]*replGroup, 0, len(n.repl.groups))
		for _, rg := range n.repl.groups {
			groups = append(groups, rg)
		}
		n.repl.mu.Unlock()
		for _, rg := range groups {
			if rg.g.Leader() != n.repl.self {
				continue
			}
			m := rg.g.Members()
			slices.Sort(m.Voters)
			if b := before[rg.id]; len(m.Learners) > 0 || m.Joint || b.leader != n.repl.self || !slices.Equal(m.Voters, b.voters) {
				return true
			}
		}
	}
	return false
}

// moves are the leadership transfers and replica replacements the nodes'
// leaders made for rebalances and moves so far.
func (c *cluster) moves() (transfers, replaced int64) {
	for _, n := range c.nodes {
		transfers += n.repl.rebal.transfers.Load()
		replaced += n.repl.rebal.replaced.Load()
	}
	return transfers, replaced
}

// atTarget reports whether every tenant's voters are its wanted replicas
// and its leader the preferred one, as n computes them.
func (c *cluster) atTarget(t *testing.T, n *testNode) (bool, string) {
	t.Helper()
	for id := range rebalanceTenants {
		lead := c.servedBy(id)
		if lead == nil {
			return false, id + " not served"
		}
		g := lead.groupOf(t, id).g
		m := g.Members()
		want, _ := n.repl.wantedIDs(id)
		pm, _ := n.repl.preferred(id)
		slices.Sort(m.Voters)
		slices.Sort(want)
		if !slices.Equal(m.Voters, want) || m.Joint || len(m.Learners) > 0 || lead.cfg.ID != pm.id {
			return false, fmt.Sprintf("%s: voters %v, want %v; led by %s, preferred %s", id, m.Voters, want, lead.cfg.ID, pm.id)
		}
	}
	return true, ""
}

// postRebalance calls POST /admin/rebalance on n.
func postRebalance(n *testNode) (int, rebalanceReport, error) {
	req, _ := http.NewRequest("POST", "http://"+n.AdminAddr().String()+"/admin/rebalance?timeout=20s", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, rebalanceReport{}, err
	}
	defer resp.Body.Close()
	var rep rebalanceReport
	err = json.NewDecoder(resp.Body).Decode(&rep)
	return resp.StatusCode, rep, err
}

type rebalanced struct {
	code int
	rep  rebalanceReport
	err  error
}

func rebalanceAsync(n *testNode) <-chan rebalanced {
	done := make(chan rebalanced, 1)
	go func() {
		code, rep, err := postRebalance(n)
		done <- rebalanced{code, rep, err}
	}()
	return done
}

// idleDevices are MQTT 5 clients connected to one node that only listen:
// when their server disconnects them, when and with which reason.
type idleDevices struct {
	mu    sync.Mutex
	at    []time.Time
	codes []byte
	slots []time.Time // the disconnect slots the node's pacer handed out
}

func (d *idleDevices) connect(t *testing.T, n *testNode, cr cred, count int) {
	t.Helper()
	for i := range count {
		cl := paho.NewClient(paho.ClientConfig{
			Conn: n.dial(t, cr, nil),
			OnServerDisconnect: func(p *paho.Disconnect) {
				d.mu.Lock()
				d.at, d.codes = append(d.at, time.Now()), append(d.codes, p.ReasonCode)
				d.mu.Unlock()
			},
		})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ack, err := cl.Connect(ctx, &paho.Connect{ClientID: fmt.Sprintf("idle-%d", i), KeepAlive: 30, CleanStart: true, Username: cr.id, UsernameFlag: true})
		cancel()
		if err != nil || ack.ReasonCode != 0 {
			t.Fatalf("idle device %d: %v %v", i, err, ack)
		}
		t.Cleanup(func() { _ = cl.Disconnect(&paho.Disconnect{}) })
	}
}

// connectLeader connects an MQTT 5 client to the tenant's leader as the
// gateway does: a CONNACK 0x9C (the leadership moved between the lookup
// and the CONNECT: a rebalance's transfer, an election) is retried at the
// leader then, for up to 15 s.
func (c *cluster) connectLeader(t *testing.T, tenant string, cr cred, clientID string, disc chan<- byte) *paho.Client {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); ; {
		n := c.leader(t, tenant, nil)
		cl := paho.NewClient(paho.ClientConfig{
			Conn: n.dial(t, cr, nil),
			OnServerDisconnect: func(d *paho.Disconnect) {
				select {
				case disc <- d.ReasonCode:
				default:
				}
			},
		})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ack, err := cl.Connect(ctx, &paho.Connect{ClientID: clientID, KeepAlive: 30, CleanStart: true, Username: cr.id, UsernameFlag: true})
		cancel()
		if err == nil && ack.ReasonCode == 0 {
			t.Cleanup(func() { _ = cl.Disconnect(&paho.Disconnect{}) })
			return cl
		}
		if ack == nil || ack.ReasonCode != 0x9c || time.Now().After(deadline) {
			t.Fatalf("connect %s at %s: %v %v", clientID, n.cfg.ID, err, ack)
		}
		t.Logf("connect %s at %s: CONNACK 0x9C (the leadership moved meanwhile): again at the leader", clientID, n.cfg.ID)
	}
}

// perSecond is the most disconnects any one-second window of the
// devices' receive times holds.
func (d *idleDevices) perSecond() (most, total int) {
	d.mu.Lock()
	at := slices.Clone(d.at)
	d.mu.Unlock()
	return mostInASecond(at), len(at)
}

// slot records a disconnect slot the node's pacer handed out.
func (d *idleDevices) slot(at time.Time) {
	d.mu.Lock()
	d.slots = append(d.slots, at)
	d.mu.Unlock()
}

// slotsPerSecond is the pacer's slots and the most any one-second window
// of them holds.
func (d *idleDevices) slotsPerSecond() (total, most int) {
	d.mu.Lock()
	at := slices.Clone(d.slots)
	d.mu.Unlock()
	return len(at), mostInASecond(at)
}

// mostInASecond is the most of at that any one-second window holds.
func mostInASecond(at []time.Time) (most int) {
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	for i := range at {
		j := i
		for j < len(at) && at[j].Sub(at[i]) < time.Second {
			j++
		}
		most = max(most, j-i)
	}
	return most
}
