package node

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/broker/internal/placement"
	"berth.dev/broker/internal/tenanttest"
	"berth.dev/broker/packet"
	"berth.dev/testenv"
)

// testRaftTick is the test clusters' raft tick: production's 100 ms, so a
// group elects after 1–2 s without its leader and a node is judged dead
// after 1 s of silence. Under `go test -race` with other packages on two
// cores, a node's goroutines run 40–90 ms late again and again (measured:
// the tick loop's own lateness at a 20 ms tick), and a member that has just
// joined answers its leader late while it takes the log; with 200 ms
// elections (a 20 ms tick) groups lost their leaders on their own mid-test
// (CheckQuorum: "quorum is not active"), which the tests then took for a
// failure of what they test. Failover tests wait a second longer.
const testRaftTick = 100 * time.Millisecond

// replTenant is the replicated tenant of the cluster tests.
const replTenant = "ten_r"

// cluster is three replicating nodes in this process: real TCP between
// them (the HMAC peer transport) and to them (PROXY-v2 connections).
type cluster struct {
	nodes []*testNode
	ids   []string
	url   string
}

func startCluster(t *testing.T, change ...func(*Config)) *cluster {
	t.Helper()
	return startClusterN(t, 3, nil, change...)
}

// startClusterN is startCluster with n nodes, each in its own zone, and
// seed run on the database before they start.
func startClusterN(t *testing.T, n int, seed func(*pgxpool.Pool), change ...func(*Config)) *cluster {
	t.Helper()
	url := testenv.DatabaseURL(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	// Pro's quotas, but a per-client message rate no test stream reaches:
	// a publisher streaming QoS 1 one at a time outruns Pro's 200/s on an
	// idle machine (PUBACK 0x97), and these tests are about replication.
	q := tenanttest.Pro()
	q.ClientMsgsPerSec, q.MaxMsgsPerSec = 1_000_000, 1_000_000
	tenanttest.Seed(t, pool, replTenant, q)
	setPlan(t, pool, replTenant, "pro") // three replicas (factor.go)
	if seed != nil {
		seed(pool)
	}
	c := &cluster{url: url}
	for i := range n {
		c.ids = append(c.ids, fmt.Sprintf("node-r%d", i+1))
	}
	addrs := freePorts(t, n)
	for i, id := range c.ids {
		var peers []Peer
		for j, other := range c.ids {
			if j != i {
				peers = append(peers, Peer{ID: other, Addr: addrs[j], Zone: fmt.Sprintf("z%d", j)})
			}
		}
		dir := t.TempDir()
		c.nodes = append(c.nodes, startNodeCfg(t, url, dir, false, func(cfg *Config) {
			cfg.ID, cfg.Peers, cfg.PeerListen, cfg.PeerSecret, cfg.Zone = id, peers, addrs[i], testSecret, fmt.Sprintf("z%d", i)
			cfg.RaftTick = testRaftTick
			cfg.ProposeTimeout = 2 * time.Second
			if os.Getenv("REPLICATION_LOG") != "" {
				cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", id)
			}
			for _, f := range change {
				f(cfg)
			}
		}))
	}
	return c
}

// setPlan puts a tenant on plan (its replication factor, factor.go).
func setPlan(t *testing.T, pool *pgxpool.Pool, tenant, plan string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `UPDATE tenants SET plan = $2 WHERE id = $1`, tenant, plan); err != nil {
		t.Fatal(err)
	}
}

// leader waits until one of the live nodes serves tenant and returns it.
func (c *cluster) leader(t *testing.T, tenant string, except *testNode) *testNode {
	t.Helper()
	var found *testNode
	poll(t, 15*time.Second, tenant+" served by a leader", func() bool {
		for _, n := range c.nodes {
			if n == except {
				continue
			}
			if _, err := n.repl.serving(tenant); err == nil {
				found = n
				return true
			}
		}
		return false
	})
	return found
}

// kill crashes n as far as the cluster can tell: its peer transport and
// groups stop at once (nothing it does afterwards reaches the others),
// then the node is shut down.
func (n *testNode) kill(t *testing.T) {
	t.Helper()
	if err := n.repl.host.Close(); err != nil {
		t.Logf("closing the killed node's host: %v", err)
	}
	start := time.Now()
	defer func() { t.Logf("killed node shut down in %v", time.Since(start).Round(time.Millisecond)) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = n.Shutdown(ctx) // its shards cannot save anything any more: errors expected
}

// placedAt waits until tenant_placement names n as tenant's leader at an
// epoch above above, with three replicas, and returns the row.
func (n *testNode) placedAt(t *testing.T, tenant string, above uint64) placement.Placement {
	t.Helper()
	var p placement.Placement
	poll(t, 10*time.Second, tenant+" placed on "+n.cfg.ID, func() bool {
		var err error
		p, err = placement.NewStore(n.pool).Get(context.Background(), tenant)
		return err == nil && p.Leader == n.cfg.ID && p.Epoch > above && len(p.Replicas) == 3
	})
	return p
}

// A follower refuses a tenant's CONNECT with CONNACK 0x9C (MQTT 5) or
// return code 3 (3.1.1); the leader accepts it.
func expectRefusedElsewhere(t *testing.T, n *testNode, c cred) {
	t.Helper()
	_, ack := sendConnect(t, n.dial(t, c, nil), &packet.Connect{Version: packet.Version5, CleanStart: true, KeepAlive: 30, ClientID: []byte("probe5")})
	if ack.Reason != packet.ErrUseAnotherServer {
		t.Fatalf("MQTT 5 CONNECT at a follower: reason %#x, want 0x9c", byte(ack.Reason))
	}
	_, ack = sendConnect(t, n.dial(t, c, nil), &packet.Connect{Version: packet.Version311, CleanStart: true, KeepAlive: 30, ClientID: []byte("probe3")})
	if ack.Reason.ConnackV3() != packet.ConnackServerUnavailable {
		t.Fatalf("3.1.1 CONNECT at a follower: return code %d, want 3", ack.Reason.ConnackV3())
	}
}

// TestLeaderKilledLosesNoAcknowledgedMessage: a tenant replicated on three
// nodes is served by its group's leader only (followers answer CONNACK
// 0x9C). A publisher sends QoS 1 messages; a persistent subscriber session
// takes the first ones live, then goes offline; the leader is killed
// mid-stream. The subscriber reconnects to the new leader, finds its
// session, and every message the old leader acknowledged reaches it.
func TestLeaderKilledLosesNoAcknowledgedMessage(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	const tenant = replTenant
	cr := cred{tenant: tenant, id: "cred_r", acl: allowAll}
	lead := c.leader(t, tenant, nil)
	for _, n := range c.nodes {
		if n != lead {
			expectRefusedElsewhere(t, n, cr)
		}
	}
	before := lead.placedAt(t, tenant, 0)

	got := make(chan string, 4096)
	sub, ack := lead.persistent5(t, cr, "sub", true, got)
	if ack.ReasonCode != 0 {
		t.Fatalf("subscriber CONNACK %#x", ack.ReasonCode)
	}
	if r := subscribe(t, sub, "r/#"); r != 1 {
		t.Fatalf("SUBACK %#x", r)
	}
	pub := lead.mqtt5(t, cr, "pub", nil)

	// Publish until the connection fails (the leader's death), noting what
	// was acknowledged.
	var mu sync.Mutex
	var acked []string
	pubDone := make(chan error, 1)
	go func() {
		for i := 0; i < 100000; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			payload := fmt.Sprintf("m%05d", i)
			r, err := pub.Publish(ctx, &paho.Publish{Topic: "r/x", QoS: 1, Payload: []byte(payload)})
			cancel()
			if err != nil || r == nil || r.ReasonCode != 0 {
				pubDone <- fmt.Errorf("publish %d: %v", i, err)
				return
			}
			mu.Lock()
			acked = append(acked, "r/x="+payload)
			mu.Unlock()
		}
		pubDone <- nil
	}()
	ackedAtLeast := func(n int) {
		t.Helper()
		poll(t, 10*time.Second, fmt.Sprintf("%d messages acknowledged", n), func() bool {
			select {
			case err := <-pubDone:
				t.Fatalf("publisher failed before the kill: %v", err)
			default:
			}
			mu.Lock()
			defer mu.Unlock()
			return len(acked) >= n
		})
	}
	// The subscriber takes the first messages live, then goes offline: the
	// rest wait in its session (offsets into the replicated log).
	ackedAtLeast(50)
	if err := sub.Disconnect(&paho.Disconnect{}); err != nil {
		t.Fatal(err)
	}
	ackedAtLeast(150)
	killedAt := time.Now()
	lead.kill(t)
	next := c.leader(t, tenant, lead)
	t.Logf("new leader %s serving %v after the kill", next.cfg.ID, time.Since(killedAt).Round(time.Millisecond))
	next.placedAt(t, tenant, before.Epoch)
	if err := <-pubDone; err == nil {
		t.Fatal("the publisher never noticed the leader's death")
	}
	mu.Lock()
	want := append([]string(nil), acked...)
	mu.Unlock()
	for _, n := range c.nodes {
		if n != lead && n != next {
			expectRefusedElsewhere(t, n, cr)
		}
	}

	_, ack = next.persistent5(t, cr, "sub", false, got)
	if ack.ReasonCode != 0 || !ack.SessionPresent {
		t.Fatalf("subscriber at the new leader: reason %#x, session present %v", ack.ReasonCode, ack.SessionPresent)
	}
	seen := map[string]int{}
	for live := true; live; { // what the subscriber took before it went offline
		select {
		case m := <-got:
			seen[m]++
		default:
			live = false
		}
	}
	live := len(seen)
	missing := func() int {
		n := 0
		for _, m := range want {
			if seen[m] == 0 {
				n++
			}
		}
		return n
	}
	deadline := time.After(15 * time.Second)
	for missing() > 0 {
		select {
		case m := <-got:
			seen[m]++
		case <-deadline:
			t.Fatalf("%d of %d acknowledged messages never delivered (first missing %s)", missing(), len(want), firstMissing(want, seen))
		}
	}
	dups := 0
	for _, n := range seen {
		dups += n - 1
	}
	t.Logf("all %d acknowledged messages delivered (%d live before the kill, the rest by the new leader); %d duplicates (QoS 1 redelivery)", len(want), live, dups)

	// The new leader acknowledges new messages.
	pub2 := next.mqtt5(t, cr, "pub2", nil)
	if r := publish(t, pub2, "r/y", "after"); r != 0 {
		t.Fatalf("PUBACK at the new leader: %#x", r)
	}
	after := time.After(10 * time.Second)
	for m := ""; m != "r/y=after"; {
		select {
		case m = <-got:
		case <-after:
			t.Fatal("the message published at the new leader was not delivered")
		}
	}
}

func firstMissing(want []string, seen map[string]int) string {
	for _, m := range want {
		if seen[m] == 0 {
			return m
		}
	}
	return ""
}

// TestLeaderWithoutQuorumStopsServing: once both followers are gone the
// leader acknowledges nothing more: a QoS 1 PUBLISH gets no successful
// PUBACK, its client is disconnected with 0x9C (use another server) when
// the group deposes the leader, and a new CONNECT is refused with 0x9C.
func TestLeaderWithoutQuorumStopsServing(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	cr := cred{tenant: replTenant, id: "cred_q", acl: allowAll}
	lead := c.leader(t, replTenant, nil)
	conn := lead.dial(t, cr, nil)
	r := rawConnect(t, conn, "pub")
	// With its quorum the leader acknowledges.
	writePacket(t, conn, &packet.Publish{QoS: 1, PacketID: 1, Topic: []byte("q/x"), Payload: []byte("before")})
	fh, body, err := r.ReadPacket(0)
	if err != nil || fh.Type != packet.TypePuback {
		t.Fatalf("want PUBACK, got %v %v", fh.Type, err)
	}
	var ack packet.Ack
	if err := ack.Decode(packet.Version5, fh, body); err != nil || ack.Reason >= 0x80 { // 0x10: no subscribers
		t.Fatalf("PUBACK reason %#x (%v)", byte(ack.Reason), err)
	}

	for _, n := range c.nodes {
		if n != lead {
			n.kill(t)
		}
	}
	writePacket(t, conn, &packet.Publish{QoS: 1, PacketID: 2, Topic: []byte("q/x"), Payload: []byte("after")})
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		fh, body, err := r.ReadPacket(0)
		if err != nil {
			t.Fatalf("want DISCONNECT 0x9c, got %v", err)
		}
		switch fh.Type {
		case packet.TypePuback:
			var ack packet.Ack
			if err := ack.Decode(packet.Version5, fh, body); err != nil || ack.Reason < 0x80 {
				t.Fatalf("a message was acknowledged without a quorum (%v)", err)
			}
			continue
		case packet.TypeDisconnect:
			var d packet.Disconnect
			if err := d.Decode(packet.Version5, fh, body); err != nil || d.Reason != packet.ErrUseAnotherServer {
				t.Fatalf("DISCONNECT reason %#x (%v), want 0x9c", byte(d.Reason), err)
			}
		default:
			continue
		}
		break
	}
	poll(t, 10*time.Second, "the deposed leader refuses the tenant", func() bool {
		_, err := lead.repl.serving(replTenant)
		return err != nil
	})
	expectRefusedElsewhere(t, lead, cr)
}
