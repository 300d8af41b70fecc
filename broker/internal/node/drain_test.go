package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// mqtt5Watched is mqtt5 with the reason code of a server DISCONNECT sent
// on disc.
func (n *testNode) mqtt5Watched(t *testing.T, c cred, clientID string, disc chan<- byte) *paho.Client {
	t.Helper()
	cl := paho.NewClient(paho.ClientConfig{
		Conn: n.dial(t, c, nil),
		OnServerDisconnect: func(d *paho.Disconnect) {
			select {
			case disc <- d.ReasonCode:
			default:
			}
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ack, err := cl.Connect(ctx, &paho.Connect{ClientID: clientID, KeepAlive: 30, CleanStart: true, Username: c.id, UsernameFlag: true})
	if err != nil || ack.ReasonCode != 0 {
		t.Fatalf("connect %s at %s: %v %v", clientID, n.cfg.ID, err, ack)
	}
	t.Cleanup(func() { _ = cl.Disconnect(&paho.Disconnect{}) })
	return cl
}

// postDrain calls POST /admin/drain on n with the node token; query is
// added to the URL's.
func postDrain(n *testNode, token string, query ...string) (int, drainReport, error) {
	q := "?timeout=30s"
	for _, x := range query {
		q += "&" + x
	}
	req, _ := http.NewRequest("POST", "http://"+n.AdminAddr().String()+"/admin/drain"+q, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, drainReport{}, err
	}
	defer resp.Body.Close()
	var rep drainReport
	err = json.NewDecoder(resp.Body).Decode(&rep)
	return resp.StatusCode, rep, err
}

// TestDrainMovesLeadershipUnderLoad: the node leading a tenant is drained
// (POST /admin/drain, node token) while a publisher streams QoS 1
// messages to it. The publisher is disconnected with 0x9C (use another
// server), reconnects to the new leader and goes on; the drain answers
// once the node leads nothing, which then refuses the tenant's CONNECTs;
// a persistent session offline throughout receives every acknowledged
// message from the new leader.
func TestDrainMovesLeadershipUnderLoad(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	const tenant = replTenant
	cr := cred{tenant: tenant, id: "cred_d", acl: allowAll}
	lead := c.leader(t, tenant, nil)

	if code, _, _ := postDrain(lead, "wrong-token"); code != http.StatusUnauthorized {
		t.Fatalf("drain with a wrong token: %d", code)
	}

	l := startDrainLoad(t, lead, cr)
	done := drainAsync(lead)

	var next *testNode
	var result *drained
	afterMove := 0
	for i := 50; i < 20000 && (result == nil || afterMove < 50); i++ {
		if result == nil {
			select {
			case d := <-done:
				result = &d
			default:
			}
		}
		if l.publish(i) {
			if next != nil {
				afterMove++
			}
			continue
		}
		if next != nil {
			t.Fatalf("publish %d at the new leader failed", i)
		}
		select {
		case code := <-l.disc:
			if code != 0x9c {
				t.Fatalf("the drained node disconnected the publisher with %#x, want 0x9c", code)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("publish %d failed without a DISCONNECT 0x9c", i)
		}
		next = c.leader(t, tenant, lead)
		t.Logf("publisher moved to %s after %d acknowledged messages", next.cfg.ID, len(l.acked))
		l.pub = next.mqtt5Watched(t, cr, "pub", l.disc)
	}
	if result == nil {
		select {
		case d := <-done:
			result = &d
		case <-time.After(35 * time.Second):
			t.Fatal("the drain never answered")
		}
	}
	// Three nodes, three replicas: no node can take the drained node's
	// replica, so the group keeps it (kept), and the drain does not wait.
	if result.err != nil || result.code != http.StatusOK || !result.rep.Drained || result.rep.Moved != 1 || len(result.rep.Remaining) != 0 ||
		result.rep.Kept != 1 || result.rep.Voting != 0 || result.rep.ReplicasMoved != 0 {
		t.Fatalf("drain: %d %+v %v", result.code, result.rep, result.err)
	}
	t.Logf("drain answered in %d ms, %d group(s) moved", result.rep.TookMS, result.rep.Moved)
	if next == nil {
		t.Fatal("the publisher was never moved off the drained node")
	}
	if led := lead.repl.ledHere(); len(led) != 0 {
		t.Fatalf("the drained node still leads %v", led)
	}
	expectRefusedElsewhere(t, lead, cr)

	l.checkDelivered(t, next, "after the drain")

	// The new leader has judged the group many times by now (every
	// memberEvery): the drained node is still one of its three voters, a
	// group of its factor has no voter too many to remove.
	var voting []*testNode
	var voters []uint64
	poll(t, 10*time.Second, "a leader's view of the group", func() bool {
		voting, voters = c.holders(tenant, nil)
		return voters != nil
	})
	if !slices.Contains(voting, lead) || len(voters) != 3 {
		t.Fatalf("after the drain: voters %v (the leader's view), drained node %s a voter: %v, want a kept voter of 3",
			voters, lead.cfg.ID, slices.Contains(voting, lead))
	}
}

// drainLoad is the load the drain tests run on the node they drain: a
// persistent subscriber to d/# parked offline, and a QoS 1 publisher to d/x
// whose acknowledged messages it records.
type drainLoad struct {
	cr    cred
	got   chan string // what the subscriber receives once it is back
	disc  chan byte   // the publisher's server DISCONNECT reason
	pub   *paho.Client
	acked []string
}

// startDrainLoad parks the subscriber, connects the publisher to n and
// publishes 50 messages, each acknowledged.
func startDrainLoad(t *testing.T, n *testNode, cr cred) *drainLoad {
	t.Helper()
	l := &drainLoad{cr: cr, got: make(chan string, 8192), disc: make(chan byte, 1)}
	sub, ack := n.persistent5(t, cr, "sub", true, l.got)
	if ack.ReasonCode != 0 {
		t.Fatalf("subscriber CONNACK %#x", ack.ReasonCode)
	}
	if r := subscribe(t, sub, "d/#"); r != 1 {
		t.Fatalf("SUBACK %#x", r)
	}
	if err := sub.Disconnect(&paho.Disconnect{}); err != nil {
		t.Fatal(err)
	}
	l.pub = n.mqtt5Watched(t, cr, "pub", l.disc)
	for i := range 50 {
		if !l.publish(i) {
			t.Fatalf("publish %d before the drain failed", i)
		}
	}
	return l
}

// publish sends message i at QoS 1 and records it when it is acknowledged.
func (l *drainLoad) publish(i int) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	payload := fmt.Sprintf("m%05d", i)
	r, err := l.pub.Publish(ctx, &paho.Publish{Topic: "d/x", QoS: 1, Payload: []byte(payload)})
	if err != nil || r == nil || r.ReasonCode >= 0x80 {
		return false
	}
	l.acked = append(l.acked, "d/x="+payload)
	return true
}

// checkDelivered resumes the subscriber's session at n and waits until it
// has received every acknowledged message.
func (l *drainLoad) checkDelivered(t *testing.T, n *testNode, when string) {
	t.Helper()
	_, ack := n.persistent5(t, l.cr, "sub", false, l.got)
	if ack.ReasonCode != 0 || !ack.SessionPresent {
		t.Fatalf("subscriber at the new leader: reason %#x, session present %v", ack.ReasonCode, ack.SessionPresent)
	}
	want := map[string]bool{}
	for _, m := range l.acked {
		want[m] = true
	}
	seen := map[string]int{}
	deadline := time.After(15 * time.Second)
	for missing := len(want); missing > 0; {
		select {
		case m := <-l.got:
			if seen[m]++; seen[m] == 1 && want[m] {
				missing--
			}
		case <-deadline:
			t.Fatalf("%d of %d acknowledged messages never delivered (first missing %s)", missing, len(l.acked), firstMissing(l.acked, seen))
		}
	}
	t.Logf("all %d acknowledged messages delivered %s, 0 lost", len(l.acked), when)
}

// drained is what a drain answered.
type drained struct {
	code int
	rep  drainReport
	err  error
}

// drainAsync drains n and delivers the answer on the returned channel.
func drainAsync(n *testNode) <-chan drained {
	done := make(chan drained, 1)
	go func() {
		code, rep, err := postDrain(n, testToken)
		done <- drained{code, rep, err}
	}()
	return done
}
