package node

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// leaderPublisher publishes QoS 1 messages to a tenant's leader one at a
// time, as a device behind the gateway does: when the leader ends the
// connection (it lost its quorum or its leadership: DISCONNECT 0x9C, or
// the connection just closes, the message unacknowledged), it connects
// to the leader then and sends the message again. A PUBACK that does not
// come on a connection the leader keeps open fails the test: that is a
// stall, not a failover.
//
// Why: a three-node group with one node down has no spare voter, and
// the leader steps down (raft's CheckQuorum) when the other follower
// answers nothing for an election timeout, 200 ms in these clusters. A
// follower answers after its append is fsynced, and on a loaded CI disk
// one fsync takes that long now and then (seen: 250–650 ms, right before
// every step-down). paho.golang does not end a Publish whose connection
// was lost (it waits for its context), so the test watches the connection.
type leaderPublisher struct {
	c      *cluster
	tenant string
	cr     cred
	id     string

	at    *testNode // the node connected to
	cl    *paho.Client
	gone  chan struct{} // closed when cl's connection ends
	moves int           // reconnections after the leader ended the connection
}

// maxLeaderMoves bounds the reconnections of one leaderPublisher.
const maxLeaderMoves = 5

func newLeaderPublisher(t *testing.T, c *cluster, tenant string, cr cred, clientID string) *leaderPublisher {
	t.Helper()
	p := &leaderPublisher{c: c, tenant: tenant, cr: cr, id: clientID}
	p.connect(t)
	return p
}

// connect connects to the tenant's leader; a CONNACK 0x9C (the leadership
// moved between the lookup and the CONNECT) is retried for up to 15 s.
func (p *leaderPublisher) connect(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); ; {
		n := p.c.leader(t, p.tenant, nil)
		gone := make(chan struct{})
		var once sync.Once
		end := func() { once.Do(func() { close(gone) }) }
		cl := paho.NewClient(paho.ClientConfig{
			Conn:               n.dial(t, p.cr, nil),
			OnServerDisconnect: func(*paho.Disconnect) { end() },
			OnClientError:      func(error) { end() },
		})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ack, err := cl.Connect(ctx, &paho.Connect{ClientID: p.id, KeepAlive: 30, CleanStart: true, Username: p.cr.id, UsernameFlag: true})
		cancel()
		if err == nil && ack.ReasonCode == 0 {
			t.Cleanup(func() { _ = cl.Disconnect(&paho.Disconnect{}) })
			p.at, p.cl, p.gone = n, cl, gone
			return
		}
		if ack == nil || ack.ReasonCode != 0x9c || time.Now().After(deadline) {
			t.Fatalf("connect %s at %s: %v %v", p.id, n.cfg.ID, err, ack)
		}
	}
}

// publish sends payload to topic at QoS 1 until a PUBACK comes and
// returns its reason code.
func (p *leaderPublisher) publish(t *testing.T, topic, payload string) byte {
	t.Helper()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		watch := make(chan struct{})
		go func(gone <-chan struct{}) {
			select {
			case <-gone:
				cancel()
			case <-watch:
			}
		}(p.gone)
		start := time.Now()
		r, err := p.cl.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte(payload)})
		close(watch)
		cancel()
		if r != nil {
			return r.ReasonCode
		}
		select {
		case <-p.gone:
		default:
			t.Fatalf("publish %q at %s: %v: no PUBACK within 5 s on a connection the leader kept open", payload, p.at.cfg.ID, err)
		}
		if p.moves++; p.moves > maxLeaderMoves {
			t.Fatalf("publish %q: the leader ended the connection %d times", payload, p.moves)
		}
		from, waited := p.at.cfg.ID, time.Since(start)
		p.connect(t)
		t.Logf("publish %q: %s ended the connection after %v, unacknowledged (%v); connected to the leader %s %v later, sending again",
			payload, from, waited.Round(time.Millisecond), err, p.at.cfg.ID, (time.Since(start) - waited).Round(time.Millisecond))
	}
}

// subscribedAtLeader opens the persistent session clientID (clean start)
// with a QoS 1 subscription to filter at the tenant's leader, then
// disconnects it; it returns that leader. An election that ends the
// connection meanwhile (CONNACK 0x9C, the connection lost before the
// SUBACK) is retried at the leader then, at most 3 times in all.
func subscribedAtLeader(t *testing.T, c *cluster, tenant string, cr cred, clientID, filter string, got chan<- string) *testNode {
	t.Helper()
	for attempt := 1; ; attempt++ {
		n := c.leader(t, tenant, nil)
		sub, ack := n.persistent5(t, cr, clientID, true, got)
		var err error
		if ack.ReasonCode == 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			var sa *paho.Suback
			sa, err = sub.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 1}}})
			cancel()
			if sa != nil && len(sa.Reasons) > 0 {
				if sa.Reasons[0] != 1 {
					t.Fatalf("SUBACK %#x", sa.Reasons[0])
				}
				if err := sub.Disconnect(&paho.Disconnect{}); err != nil {
					t.Fatal(err)
				}
				return n
			}
		}
		moved := ack.ReasonCode == 0x9c || (ack.ReasonCode == 0 && errors.Is(err, paho.ErrConnectionLost))
		if !moved || attempt == 3 {
			t.Fatalf("subscribing %s at %s: CONNACK %#x, %v", clientID, n.cfg.ID, ack.ReasonCode, err)
		}
		t.Logf("subscribing %s at %s: CONNACK %#x, %v: the leadership moved; again at the leader", clientID, n.cfg.ID, ack.ReasonCode, err)
	}
}
