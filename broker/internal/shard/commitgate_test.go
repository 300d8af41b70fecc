package shard

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"berth.dev/broker/internal/replica"
	"berth.dev/broker/internal/store"
	"berth.dev/broker/internal/tenantlog"
	"berth.dev/broker/internal/wal"
	"berth.dev/broker/packet"
)

// Subscribers see only what is durable by the rule in force (Kafka's high
// watermark): a message reaches no subscriber before its record is
// committed (replicated) or fsynced (-fsync always), as no PUBACK does.

// readUntilClosed reads what c's server sends until it closes the
// connection. It fails the test on a PUBLISH whose payload starts with
// never, and returns the reason of the DISCONNECT read, if any.
func readUntilClosed(t *testing.T, c *rawClient, never string) packet.ReasonCode {
	t.Helper()
	reason := packet.ReasonCode(0xff) // none read
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		fh, body, err := c.next()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue // no close yet
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || isReset(err) {
				return reason
			}
			t.Fatalf("reading: %v", err)
		}
		switch fh.Type {
		case packet.TypePublish:
			var p packet.Publish
			if err := p.Decode(c.version, fh, body); err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(string(p.Payload), never) {
				t.Fatalf("subscriber got %q (QoS %d) though its record never became durable", p.Payload, p.QoS)
			}
		case packet.TypeDisconnect:
			var d packet.Disconnect
			if err := d.Decode(c.version, fh, body); err != nil {
				t.Fatal(err)
			}
			reason = d.Reason
		}
	}
	t.Fatal("the server did not close the connection within 20 s")
	return reason
}

// persistentSub connects clientID with a session that outlives the
// connection (clean start off, expiry 1 h) and subscribes it to filter.
func persistentSub(t *testing.T, addr, clientID, filter string, qos byte) (*rawClient, *packet.Connack) {
	t.Helper()
	c := dialRaw(t, addr, packet.Version5)
	cp := &packet.Connect{ClientID: []byte(clientID)}
	cp.Props.Has.Set(packet.PropSessionExpiry)
	cp.Props.SessionExpiry = 3600
	ack := c.connect(cp)
	if ack.Reason != packet.CodeSuccess {
		t.Fatalf("CONNACK %v", ack.Reason)
	}
	if filter != "" {
		c.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte(filter), QoS: qos})
	}
	return c, ack
}

// receive reads PUBLISH packets from c, acknowledging them (and answering
// PUBREL), until one carries payload until, and counts the payloads.
func receive(t *testing.T, c *rawClient, until string) map[string]int {
	t.Helper()
	got := map[string]int{}
	for {
		fh, body, err := c.next()
		if err != nil {
			t.Fatalf("waiting for %q (got %v): %v", until, got, err)
		}
		switch fh.Type {
		case packet.TypePubrel:
			var a packet.Ack
			if err := a.Decode(c.version, fh, body); err != nil {
				t.Fatal(err)
			}
			c.send(&packet.Ack{Type: packet.TypePubcomp, PacketID: a.PacketID})
			continue
		case packet.TypePublish:
		default:
			t.Fatalf("got %v waiting for %q", fh.Type, until)
		}
		var p packet.Publish
		if err := p.Decode(c.version, fh, body); err != nil {
			t.Fatal(err)
		}
		got[string(p.Payload)]++
		switch p.QoS {
		case 1:
			c.send(&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID})
		case 2:
			c.send(&packet.Ack{Type: packet.TypePubrec, PacketID: p.PacketID})
		}
		if string(p.Payload) == until {
			return got
		}
	}
}

// TestFsyncAlwaysDeliversOnlyFsynced: standalone, -fsync always. The
// message log's fsync fails while a QoS 1 and a QoS 2 message wait for it:
// their publisher is disconnected unacknowledged (it will send them again),
// so no subscriber may have them either, live (a clean QoS 2 subscriber, a
// persistent QoS 1 one) or from the log when the persistent one returns.
// Before the fix the subscribers got both at once, from the page cache.
func TestFsyncAlwaysDeliversOnlyFsynced(t *testing.T) {
	t.Parallel()
	b, dfs := faultyShard(t, wal.SyncAlways)
	q2 := v5Client(t, b, "clean-q2")
	q2.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("disk/#"), QoS: 2})
	q1, _ := persistentSub(t, b.addr, "persistent-q1", "disk/#", 1)
	pub := v5Client(t, b, "pub")
	publishQoS(pub, 1, 1, 1)
	publishQoS(pub, 2, 2, 2)
	for _, sub := range []*rawClient{q2, q1} {
		if got := receive(t, sub, "2"); got["1"] != 1 {
			t.Fatalf("before the fault: %v", got)
		}
	}

	dfs.syncErr.Store(true)
	pub.send(&packet.Publish{QoS: 1, PacketID: 3, Topic: []byte("disk/t"), Payload: []byte("lost-1")})
	pub.send(&packet.Publish{QoS: 2, PacketID: 4, Topic: []byte("disk/t"), Payload: []byte("lost-2")})
	if r := readUntilClosed(t, pub, "-"); r != packet.ErrUnspecified {
		t.Fatalf("publisher: DISCONNECT %v, want 0x80", r)
	}
	for _, sub := range []*rawClient{q2, q1} {
		if r := readUntilClosed(t, sub, "lost"); r != packet.ErrUnspecified {
			t.Errorf("subscriber: DISCONNECT %v, want 0x80 (its messages cannot become durable)", r)
		}
	}
	dfs.syncErr.Store(false)

	// The persistent subscriber returns: the unfsynced records are in the
	// log file (page cache), but not durable, so not delivered. A QoS 0
	// message (never logged) ends the wait.
	back, ack := persistentSub(t, b.addr, "persistent-q1", "", 0)
	if !ack.SessionPresent {
		t.Fatal("session lost")
	}
	marker := v5Client(t, b, "marker")
	marker.send(&packet.Publish{Topic: []byte("disk/t"), Payload: []byte("q0-end")})
	if got := receive(t, back, "q0-end"); got["lost-1"]+got["lost-2"] != 0 {
		t.Fatalf("returning subscriber got unfsynced messages: %v", got)
	}
}

// replicaCluster is a tenant store replicated by three nodes in this
// process (real TCP, raft logs fsynced), nothing leading yet. Its raft
// runs at production timing (the 100 ms default tick: elections after
// 1–2 s of silence): at a 20 ms tick, under -race beside other packages,
// the leader lost its quorum on its own before the test cut it off.
type replicaCluster struct {
	hosts  []*replica.Host
	groups []*replica.Group
	logs   []*tenantlog.Log
	stores []*store.WAL
}

func newReplicaCluster(t *testing.T, opts tenantlog.Options) *replicaCluster {
	t.Helper()
	rc := &replicaCluster{}
	for id := uint64(1); id <= 3; id++ {
		h, err := replica.New(replica.Config{NodeID: id, Listen: "127.0.0.1:0", Secret: []byte("gate-secret-0123456789"),
			Dir: t.TempDir(), Fsync: wal.SyncAlways})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Close() })
		st := openWALStore(t, t.TempDir(), wal.SyncNever) // the raft log is the durable copy
		l := tenantlog.New(st, opts)
		t.Cleanup(l.Stop)
		rc.hosts, rc.logs, rc.stores = append(rc.hosts, h), append(rc.logs, l), append(rc.stores, st)
	}
	for i, h := range rc.hosts {
		for j, p := range rc.hosts {
			if i != j {
				h.AddPeer(uint64(j+1), p.Addr())
			}
		}
	}
	for i, h := range rc.hosts {
		g, err := h.OpenGroup(1, []uint64{1, 2, 3}, rc.logs[i])
		if err != nil {
			t.Fatal(err)
		}
		rc.groups = append(rc.groups, g)
	}
	return rc
}

// lead waits until a node other than not leads with another node agreeing,
// makes its Log serve, and returns it.
func (rc *replicaCluster) lead(t *testing.T, not int) int {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		for i, g := range rc.groups {
			if i == not || g.Leader() != uint64(i+1) {
				continue
			}
			for j, o := range rc.groups {
				if j == i || j == not || o.Leader() != uint64(i+1) {
					continue
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := rc.logs[i].Lead(ctx, g)
				cancel()
				if err == nil {
					return i
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no leader within 15 s")
	return -1
}

// isolate cuts node i off from the other two, both ways.
func (rc *replicaCluster) isolate(i int) {
	var others []uint64
	for j, h := range rc.hosts {
		if j != i {
			others = append(others, uint64(j+1))
			h.Partition(uint64(i + 1))
		}
	}
	rc.hosts[i].Partition(others...)
}

// shardOn serves a shard on node i's replicated store.
func (rc *replicaCluster) shardOn(t *testing.T, i int) *testBroker {
	t.Helper()
	st := rc.stores[i]
	return startBrokerWith(t, New(Options{Store: st, MessageLog: st.Messages(), Replication: rc.logs[i],
		SysInterval: -1, CheckpointInterval: 20 * time.Millisecond}))
}

// TestReplicatedSubscribersSeeOnlyCommitted: R3. The leader is cut off
// from both followers, then takes a QoS 1 and a QoS 2 PUBLISH (and a
// retained one): none commits, so none is acknowledged, and none may reach
// a subscriber, live (a persistent QoS 1 subscriber, a clean QoS 2 one, a
// persistent QoS 2 one) or as a retained message shown to a new
// subscription. The majority elects a new leader; the publisher sends its
// two messages again (DUP) there, the persistent subscribers resume there,
// and each gets each message exactly once. Before the fix the subscribers
// on the cut-off leader got the messages at once, and the QoS 1 one got
// them a second time from the new leader.
func TestReplicatedSubscribersSeeOnlyCommitted(t *testing.T) {
	t.Parallel()
	rc := newReplicaCluster(t, tenantlog.Options{ProposeTimeout: time.Second})
	a := rc.lead(t, -1)
	ba := rc.shardOn(t, a)
	q1, _ := persistentSub(t, ba.addr, "persistent-q1", "r/#", 1)
	q2p, _ := persistentSub(t, ba.addr, "persistent-q2", "r/#", 2)
	q2c := v5Client(t, ba, "clean-q2")
	q2c.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("r/#"), QoS: 2})
	pub := v5Client(t, ba, "pub")
	pub.send(&packet.Publish{QoS: 1, PacketID: 1, Topic: []byte("r/t"), Payload: []byte("committed")})
	pub.ack(packet.TypePuback)
	for _, sub := range []*rawClient{q1, q2p, q2c} {
		if got := receive(t, sub, "committed"); len(got) != 1 {
			t.Fatalf("before the partition: %v", got)
		}
	}

	rc.isolate(a)
	pub.send(&packet.Publish{QoS: 1, PacketID: 10, Topic: []byte("r/t"), Payload: []byte("uncommitted-1")})
	pub.send(&packet.Publish{QoS: 2, PacketID: 11, Topic: []byte("r/t"), Payload: []byte("uncommitted-2")})
	if r := readUntilClosed(t, pub, "-"); r != packet.ErrUseAnotherServer {
		t.Fatalf("publisher on the cut-off leader: DISCONNECT %v, want 0x9C", r)
	}
	for _, sub := range []*rawClient{q1, q2p, q2c} {
		if r := readUntilClosed(t, sub, "uncommitted"); r != packet.ErrUseAnotherServer {
			t.Errorf("subscriber on the cut-off leader: DISCONNECT %v, want 0x9C", r)
		}
	}
	// A retained message that cannot commit is not shown to a new
	// subscription (the Log has failed: it is refused at once). A QoS 0
	// message, never logged, ends the wait.
	rpub := v5Client(t, ba, "retain-pub")
	rpub.send(&packet.Publish{QoS: 1, PacketID: 1, Retain: true, Topic: []byte("ret/t"), Payload: []byte("uncommitted-retained")})
	if a := rpub.ack(packet.TypePuback); a.Reason < 0x80 {
		t.Fatalf("retained PUBLISH on the cut-off leader acknowledged: %v", a.Reason)
	}
	late := v5Client(t, ba, "late")
	late.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("ret/#"), QoS: 1})
	rpub.send(&packet.Publish{Topic: []byte("ret/end"), Payload: []byte("q0-end")})
	if got := receive(t, late, "q0-end"); got["uncommitted-retained"] != 0 {
		t.Fatalf("uncommitted retained message shown to a new subscription: %v", got)
	}

	b := rc.lead(t, a)
	bb := rc.shardOn(t, b)
	q1, ack1 := persistentSub(t, bb.addr, "persistent-q1", "", 0)
	q2p, ack2 := persistentSub(t, bb.addr, "persistent-q2", "", 0)
	if !ack1.SessionPresent || !ack2.SessionPresent {
		t.Fatal("the new leader lost a subscriber's session")
	}
	pub = v5Client(t, bb, "pub")
	pub.send(&packet.Publish{QoS: 1, PacketID: 10, Dup: true, Topic: []byte("r/t"), Payload: []byte("uncommitted-1")})
	pub.ack(packet.TypePuback)
	pub.send(&packet.Publish{QoS: 2, PacketID: 11, Dup: true, Topic: []byte("r/t"), Payload: []byte("uncommitted-2")})
	pub.ack(packet.TypePubrec)
	pub.send(&packet.Ack{Type: packet.TypePubrel, PacketID: 11})
	pub.ack(packet.TypePubcomp)
	pub.send(&packet.Publish{QoS: 1, PacketID: 12, Topic: []byte("r/t"), Payload: []byte("end")})
	pub.ack(packet.TypePuback)
	for name, sub := range map[string]*rawClient{"QoS 1": q1, "QoS 2": q2p} {
		got := receive(t, sub, "end")
		if got["uncommitted-1"] != 1 || got["uncommitted-2"] != 1 {
			t.Errorf("%s subscriber across the failover got %v, want each re-sent message once", name, got)
		}
	}
}
