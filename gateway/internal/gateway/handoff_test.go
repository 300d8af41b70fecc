package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/redis/go-redis/v9"

	"berth.dev/broker/handoff"
	"berth.dev/broker/packet"
)

// newHandoffEnv is newEnv with -handoff-dir set and a node (id node_1,
// ten_acme's) listening in it for handoffs, connected before it returns.
// Relayed connections still go to e.node; handed-off ones to ho.tcp.
func newHandoffEnv(t *testing.T, o envOptions) (*testEnv, *hoNode) {
	t.Helper()
	dir := t.TempDir()
	ho := newHoNode(t, dir, "node_1", newTestNode(t, []byte("test-proxy-secret-0123456789abcd")))
	cfg := o.config
	o.config = func(c *Config) {
		c.HandoffDir = dir
		if cfg != nil {
			cfg(c)
		}
	}
	e := newEnv(t, o)
	if string(e.secret) != "test-proxy-secret-0123456789abcd" {
		t.Fatal("newEnv's proxy secret changed; newHandoffEnv must follow")
	}
	waitUntil(t, func() bool { return e.gw.ho.node("node_1") != nil })
	return e, ho
}

// leaseCount is the gateway's count of ten_acme's connections in Redis.
func leaseCount(t *testing.T, e *testEnv) int {
	t.Helper()
	n, err := e.redis.Client.HGet(context.Background(), e.redis.Prefix+"leases:{"+tenantAcme+"}", e.cfg.GatewayID).Int()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// handoffsTaken is the gateway's count of devices handed off (0 or 1 here).
func handoffsTaken(t *testing.T, e *testEnv) int {
	t.Helper()
	if strings.Contains(scrape(t, e), `berth_gateway_handoffs_total{result="taken"} 1`) {
		return 1
	}
	return 0
}

// noRelay fails if e's TCP node got a connection: nothing was relayed.
func noRelay(t *testing.T, e *testEnv) {
	t.Helper()
	select {
	case got := <-e.node.conns:
		t.Fatalf("a connection was relayed over TCP: %+v", got)
	default:
	}
}

// A plain-TCP device of a tenant whose node is connected for handoff is
// handed to it: the node reads the CONNECT itself (the gateway only
// peeked) and serves the device, nothing is relayed, the device's slot is
// held in Redis while it is connected and freed when it leaves.
func TestHandoffServesTCPDevice(t *testing.T) {
	e, ho := newHandoffEnv(t, envOptions{})
	id, tok := e.credential(t, tenantAcme, nil)
	c, rc, err := connect5(t, e.addr(KindTCP), id, tok)
	if err != nil || rc != 0 {
		t.Fatalf("connect: reason %#x, err %v", byte(rc), err)
	}
	s := ho.next(t)
	if !s.taken || s.info.TenantID != tenantAcme || s.info.CredentialID != id {
		t.Fatalf("the node got %+v, want %s of %s taken", s, id, tenantAcme)
	}
	if nc := ho.tcp.next(t); nc.clientID != "dev-5" || nc.version != packet.Version5 {
		t.Fatalf("the node read the CONNECT of %q (v%d), want dev-5 v5", nc.clientID, nc.version)
	}

	got := make(chan string, 1)
	c.AddOnPublishReceived(func(pr paho.PublishReceived) (bool, error) {
		got <- string(pr.Packet.Payload)
		return true, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Publish(ctx, &paho.Publish{Topic: "devices/1/up", QoS: 1, Payload: []byte("direct")}); err != nil {
		t.Fatalf("publish on the handed-off socket: %v", err)
	}
	select {
	case p := <-got:
		if p != "direct" {
			t.Fatalf("echo %q", p)
		}
	case <-ctx.Done():
		t.Fatal("no echo from the node")
	}
	noRelay(t, e)
	// The node answers the device before the gateway reads its taken.
	waitUntil(t, func() bool { return handoffsTaken(t, e) == 1 })
	if n := leaseCount(t, e); n != 1 {
		t.Fatalf("Redis counts %d connections of the gateway, want 1", n)
	}

	c.Disconnect(&paho.Disconnect{})
	waitUntil(t, func() bool { return leaseCount(t, e) == 0 && e.gw.d.Limits.Held(tenantAcme) == 0 })
}

// rawConnect311 is a 3.1.1 CONNECT of client raw-1.
func rawConnect311(t *testing.T, user, pass string) []byte {
	t.Helper()
	b, err := (&packet.Connect{Version: packet.Version311, CleanStart: true, KeepAlive: 30, ClientID: []byte("raw-1"),
		UsernameFlag: true, Username: []byte(user), PasswordFlag: true, Password: []byte(pass)}).Append(nil, packet.Version311)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rawHandedOff connects a raw 3.1.1 device, checks that it was handed off
// and accepted, and returns its connection.
func rawHandedOff(t *testing.T, e *testEnv, ho *hoNode, user, pass string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", e.addr(KindTCP))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(rawConnect311(t, user, pass)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || !bytes.Equal(buf, []byte{0x20, 2, 0, 0}) {
		t.Fatalf("CONNACK % x (%v)", buf, err)
	}
	if s := ho.next(t); !s.taken {
		t.Fatalf("not handed off: %+v", s)
	}
	return c
}

// The gateway only peeks at the CONNECT: bytes the device sent after it
// in the same segment reach the node; a CONNECT the gateway refuses gets
// its CONNACK and a clean close, as without handoff.
func TestHandoffPeeksOnlyTheConnect(t *testing.T) {
	e, ho := newHandoffEnv(t, envOptions{})
	id, tok := e.credential(t, tenantAcme, nil)
	connect := func(pass string) []byte { return rawConnect311(t, id, pass) }
	// CONNECT and PINGREQ in one write: CONNACK and PINGRESP from the node.
	c, err := net.Dial("tcp", e.addr(KindTCP))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(append(connect(tok), 0xC0, 0)); err != nil {
		t.Fatal(err)
	}
	want := []byte{0x20, 2, 0, 0, 0xD0, 0}
	buf := make([]byte, len(want))
	if _, err := io.ReadFull(c, buf); err != nil || !bytes.Equal(buf, want) {
		t.Fatalf("got % x (%v), want CONNACK and PINGRESP % x", buf, err, want)
	}
	if s := ho.next(t); !s.taken {
		t.Fatalf("not handed off: %+v", s)
	}
	noRelay(t, e)

	// A bad token: CONNACK 0x04 (3.1.1's bad user name or password), then EOF.
	if out := rawConnect(t, e.addr(KindTCP), connect("not-a-token")); !bytes.Equal(out, []byte{0x20, 2, 0, 4}) {
		t.Fatalf("refused CONNECT answered % x, want 20 02 00 04 and a close", out)
	}
	select {
	case s := <-ho.seen:
		t.Fatalf("a refused CONNECT was handed off: %+v", s)
	default:
	}
}

// A node that answers not-leader keeps nothing: the gateway re-reads the
// route and relays the device over TCP to the leader it names (here on
// another host: no handoff connection), which reads the CONNECT the
// gateway consumed from the socket.
func TestHandoffNotLeaderFallsBackToRelay(t *testing.T) {
	e, ho := newHandoffEnv(t, envOptions{})
	leader := newTestNode(t, e.secret)
	e.exec(t, `INSERT INTO nodes (id, mqtt_addr, admin_addr, capacity) VALUES ('node_leader', $1, '127.0.0.1:1', 10)`, leader.addr())
	ho.setRefuse(tenantAcme, handoff.RefusedNotLeader, func() {
		// The election the node knows of, recorded before its answer.
		e.exec(t, `INSERT INTO tenant_placement (tenant_id, leader, replicas, epoch)
			VALUES ('ten_acme', 'node_leader', '{node_1,node_leader}', 2)`)
	})
	id, tok := e.credential(t, tenantAcme, nil)
	c, rc, err := connect5(t, e.addr(KindTCP), id, tok)
	if err != nil || rc != 0 {
		t.Fatalf("connect: reason %#x, err %v", byte(rc), err)
	}
	if s := ho.next(t); s.taken || s.reason.String() != "not-leader" {
		t.Fatalf("the local node answered %+v, want not-leader", s)
	}
	nc := leader.next(t)
	if nc.err != nil || nc.info.CredentialID != id || nc.clientID != "dev-5" {
		t.Fatalf("the leader got %+v, want %s's CONNECT", nc, id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Publish(ctx, &paho.Publish{Topic: "devices/1/up", QoS: 1, Payload: []byte("relayed")}); err != nil {
		t.Fatalf("publish through the relay: %v", err)
	}
	noRelay(t, e)
	if n := e.gw.d.Limits.Held(tenantAcme); n != 1 {
		t.Fatalf("held %d, want 1", n)
	}
}

// Any other refusal (here over-capacity) also leaves the device to the
// TCP relay, to the same node, which answers it itself.
func TestHandoffRefusedFallsBackToRelay(t *testing.T) {
	e, ho := newHandoffEnv(t, envOptions{})
	ho.setRefuse(tenantAcme, handoff.RefusedOverCapacity, nil)
	id, tok := e.credential(t, tenantAcme, nil)
	if _, rc, err := connect5(t, e.addr(KindTCP), id, tok); err != nil || rc != 0 {
		t.Fatalf("connect: reason %#x, err %v", byte(rc), err)
	}
	if s := ho.next(t); s.taken || s.reason != handoff.RefusedOverCapacity {
		t.Fatalf("the node answered %+v, want over-capacity", s)
	}
	if nc := e.node.next(t); nc.err != nil || nc.info.CredentialID != id || nc.clientID != "dev-5" {
		t.Fatalf("relayed %+v, want %s's CONNECT", nc, id)
	}
	waitUntil(t, func() bool {
		return strings.Contains(scrape(t, e), `berth_gateway_handoffs_total{result="over-capacity"} 1`)
	})
}

// A revoked credential's handed-off device is ended by the node; a node
// that does not (this one ignores revocations) is asked to by the
// gateway's backstop (close), after revokeGrace.
func TestHandoffRevocationBackstop(t *testing.T) {
	e, ho := newHandoffEnv(t, envOptions{})
	id, tok := e.credential(t, tenantAcme, nil)
	c := rawHandedOff(t, e, ho, id, tok)
	revokeUntilClosed(t, e, id, c, "device")
	waitUntil(t, func() bool { return leaseCount(t, e) == 0 })
	if m := scrape(t, e); !strings.Contains(m, "berth_gateway_revoked_disconnects_total 1") {
		t.Fatalf("revocation not counted:\n%s", m)
	}
}

// A gateway that restarts (same -gateway-id) adopts the devices it handed
// off before: the node's hello lists them, their slots are counted again,
// and the node's closed frees them.
func TestHandoffRestartAdopts(t *testing.T) {
	e, ho := newHandoffEnv(t, envOptions{})
	id, tok := e.credential(t, tenantAcme, nil)
	c, rc, err := connect5(t, e.addr(KindTCP), id, tok)
	if err != nil || rc != 0 {
		t.Fatalf("connect: reason %#x, err %v", byte(rc), err)
	}
	if s := ho.next(t); !s.taken {
		t.Fatalf("not handed off: %+v", s)
	}
	waitUntil(t, func() bool { return e.gw.d.Limits.Held(tenantAcme) == 1 && handoffsTaken(t, e) == 1 })
	_, lim := restartHandoffGateway(t, e, ho)
	waitUntil(t, func() bool { return lim.Held(tenantAcme) == 1 && leaseCount(t, e) == 1 })

	// Still served by the node, and its end frees the adopted slot.
	pctx, pcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer pcancel()
	if _, err := c.Publish(pctx, &paho.Publish{Topic: "devices/1/up", QoS: 1, Payload: []byte("still")}); err != nil {
		t.Fatalf("publish after the gateway's restart: %v", err)
	}
	c.Disconnect(&paho.Disconnect{})
	waitUntil(t, func() bool { return lim.Held(tenantAcme) == 0 && leaseCount(t, e) == 0 })
}

// When the node's connection ends (the node died: the devices' sockets
// with it), the leases of the devices it had taken are released.
func TestHandoffNodeGoneReleases(t *testing.T) {
	e, ho := newHandoffEnv(t, envOptions{})
	id, tok := e.credential(t, tenantAcme, nil)
	if _, rc, err := connect5(t, e.addr(KindTCP), id, tok); err != nil || rc != 0 {
		t.Fatalf("connect: reason %#x, err %v", byte(rc), err)
	}
	if s := ho.next(t); !s.taken {
		t.Fatalf("not handed off: %+v", s)
	}
	if n := leaseCount(t, e); n != 1 {
		t.Fatalf("Redis counts %d, want 1", n)
	}
	ho.stop()
	waitUntil(t, func() bool { return leaseCount(t, e) == 0 && e.gw.d.Limits.Held(tenantAcme) == 0 })
	waitUntil(t, func() bool { return e.gw.ho.node("node_1") == nil })

	// With no handoff connection the device is relayed, as without the flag.
	id2, tok2 := e.credential(t, tenantAcme, nil)
	if _, rc, err := connect5(t, e.addr(KindTCP), id2, tok2); err != nil || rc != 0 {
		t.Fatalf("connect without the node's handoff socket: reason %#x, err %v", byte(rc), err)
	}
	if nc := e.node.next(t); nc.info.CredentialID != id2 {
		t.Fatalf("relayed %+v, want %s", nc, id2)
	}
}

// Handed-off devices are the node's: they do not hold the gateway's drain
// (Shutdown returns without cutting anything), stay connected through it,
// and keep their slots until the process exits.
func TestHandoffDrainDoesNotWait(t *testing.T) {
	e, ho := newHandoffEnv(t, envOptions{})
	id, tok := e.credential(t, tenantAcme, nil)
	c := rawHandedOff(t, e, ho, id, tok)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := e.gw.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown = %v, want nil: nothing to drain", err)
	}
	t.Logf("Shutdown took %v with one device handed off", time.Since(start).Round(time.Millisecond))
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte{0xC0, 0}); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2)
	if _, err := io.ReadFull(c, buf); err != nil || buf[0] != 0xD0 {
		t.Fatalf("PINGRESP after the gateway's drain: % x (%v)", buf, err)
	}
	if n := e.gw.d.Limits.Held(tenantAcme); n != 1 {
		t.Fatalf("held %d after the drain, want 1 until the process exits", n)
	}
}
