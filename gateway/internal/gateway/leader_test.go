package gateway

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"berth.dev/broker/packet"
	"berth.dev/broker/proxyproto"
)

// followerNode stands in for a node that does not lead the tenant: it
// verifies the PROXY header as a node must, reads the CONNECT and answers
// MQTT 5 CONNACK with reason (0x9C Use another server, 0x9D Server moved).
// before, when set, runs just before the answer (the test moves the
// placement there, as the new leader would have recorded it).
type followerNode struct {
	ln     net.Listener
	reason atomic.Uint32
	before atomic.Pointer[func()]
	seen   atomic.Int32 // CONNECTs read after a valid header
	bad    atomic.Int32 // headers refused
	wg     sync.WaitGroup
}

func newFollowerNode(t *testing.T, secret []byte, reason packet.ReasonCode) *followerNode {
	t.Helper()
	v, err := proxyproto.NewVerifier(secret, proxyproto.VerifierOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &followerNode{ln: ln}
	f.reason.Store(uint32(reason))
	f.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.wg.Go(func() { defer c.Close(); f.serve(c, v) })
		}
	})
	t.Cleanup(func() { ln.Close(); f.wg.Wait() })
	return f
}

func (f *followerNode) serve(c net.Conn, v *proxyproto.Verifier) {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	var (
		h    proxyproto.Header
		info proxyproto.Info
	)
	raw, err := proxyproto.ReadHeader(c, 2*time.Second, 4096, nil)
	if err == nil {
		err = v.Verify(raw, &h, &info)
	}
	if err != nil {
		f.bad.Add(1)
		return
	}
	r := packet.NewReader(c, 4096)
	fh, body, err := r.ReadPacket(1 << 20)
	var connect packet.Connect
	if err != nil || connect.Decode(0, fh, body) != nil {
		return
	}
	f.seen.Add(1)
	if fn := f.before.Load(); fn != nil {
		(*fn)()
	}
	ack := packet.Connack{Reason: packet.ReasonCode(f.reason.Load())}
	if connect.Version == packet.Version5 {
		ack.Props.ServerReference = []byte("10.9.9.9:1883") // internal: the gateway must not pass it on
	} else {
		ack.Reason = packet.ErrServerUnavailable // 3.1.1 has no "use another server"
	}
	out, err := ack.Append(nil, connect.Version)
	if err != nil {
		return
	}
	c.Write(out)
}

func (e *testEnv) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := e.pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// A node answering CONNACK 0x9C or 0x9D is not the device's answer: the
// gateway reads the tenant's placement again and connects the device to the
// leader it names; when no node tried leads, the device gets 0x88.
func TestRetryLeader(t *testing.T) {
	for _, reason := range []packet.ReasonCode{packet.ErrUseAnotherServer, packet.ErrServerMoved} {
		t.Run(reason.Error(), func(t *testing.T) {
			e := newEnv(t, envOptions{})
			f := newFollowerNode(t, e.secret, reason)
			e.exec(t, `INSERT INTO nodes (id, mqtt_addr, admin_addr, capacity) VALUES ('node_f', $1, '127.0.0.1:1', 10)`, f.ln.Addr().String())
			e.exec(t, `INSERT INTO tenant_placement (tenant_id, leader, replicas, epoch) VALUES ('ten_acme', 'node_f', '{node_f,node_1}', 1)`)
			id, tok := e.credential(t, tenantAcme, nil)

			// The placement moves to node_1 while the follower answers; the
			// NOTIFY is held back (trigger off), so only the gateway's
			// re-read after the refusal can find the new leader.
			moved := func() { // on the follower's goroutine: t.Error, not t.Fatal
				for _, q := range []string{
					`ALTER TABLE tenant_placement DISABLE TRIGGER tenant_placement_changed`,
					`UPDATE tenant_placement SET leader = 'node_1', epoch = 2 WHERE tenant_id = 'ten_acme' AND epoch < 2`,
					`ALTER TABLE tenant_placement ENABLE TRIGGER tenant_placement_changed`,
				} {
					if _, err := e.pool.Exec(context.Background(), q); err != nil {
						t.Errorf("%s: %v", q, err)
					}
				}
			}
			f.before.Store(&moved)
			start := time.Now()
			c, rc, err := connect5(t, e.addr(KindTCP), id, tok)
			if err != nil || rc != 0 {
				t.Fatalf("connect: reason %#x, err %v; want success through the leader", byte(rc), err)
			}
			t.Logf("connect through a refusing follower took %v", time.Since(start))
			if n := f.seen.Load(); n != 1 {
				t.Fatalf("the follower saw %d CONNECTs, want 1", n)
			}
			nc := relayed(t, e, id, packet.Version5, "dev-5")
			if nc.info.TenantID != tenantAcme {
				t.Fatalf("leader got tenant %q", nc.info.TenantID)
			}
			// The relay works end to end after the retry: QoS 1 through the leader.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := c.Publish(ctx, &paho.Publish{Topic: "devices/1/up", QoS: 1, Payload: []byte("after retry")}); err != nil {
				t.Fatalf("publish through the leader: %v", err)
			}

			// Nobody leads: every attempt is refused, the device gets 0x88.
			f.before.Store(nil)
			e.exec(t, `UPDATE tenant_placement SET leader = 'node_f', epoch = 3 WHERE tenant_id = 'ten_acme' AND epoch < 3`)
			id2, tok2 := e.credential(t, tenantAcme, nil)
			waitUntil(t, func() bool {
				r, err := e.gw.d.Routes.Lookup(context.Background(), tenantAcme)
				return err == nil && r.NodeID == "node_f"
			})
			before := f.seen.Load()
			_, rc, _ = connect5(t, e.addr(KindTCP), id2, tok2)
			if rc != packet.ErrServerUnavailable {
				t.Fatalf("no leader: device got %#x, want 0x88", byte(rc))
			}
			if n := f.seen.Load() - before; n != 1+maxLeaderRetries {
				t.Fatalf("the follower saw %d CONNECTs, want %d", n, 1+maxLeaderRetries)
			}
			if n := f.bad.Load(); n != 0 {
				t.Fatalf("%d PROXY headers refused: a retry must sign a fresh one", n)
			}

			// 3.1.1 has no 0x9C: the node's answer reaches the device as it is.
			before = f.seen.Load()
			_, rc3, _ := connect311(t, "tcp://"+e.addr(KindTCP), id2, tok2, nil)
			if rc3 != 3 || f.seen.Load()-before != 1 {
				t.Fatalf("3.1.1: return code %d after %d CONNECTs, want 3 after 1", rc3, f.seen.Load()-before)
			}
		})
	}
}
