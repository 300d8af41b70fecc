package node

import (
	"context"
	"testing"
	"time"

	"berth.dev/broker/packet"
)

// A connection through the PROXY-v2 listener parks without its net.Conn
// (the shard's detach.go) and gets a new socket under the same
// proxiedConn when it wakes: its PINGREQs are answered, its PUBLISH
// routed, and the connection keeps its identity, by which a
// revocation finds it (shard.End with the proxiedConn) while it is
// detached again: MQTT 5 DISCONNECT 0x87.
func TestProxiedConnectionDetaches(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	ctx := context.Background()
	const id = "crd_detach"
	if _, err := n.pool.Exec(ctx, `INSERT INTO credentials (id, tenant_id, name, acl) VALUES ($1, 'ten_a', 'd', '{}')`, id); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 4)
	watch := n.mqtt5(t, cred{"ten_a", "crd_a", allowAll, 0}, "det-watcher", got)
	subscribe(t, watch, "det/#")
	sh := n.shardOf(t, "ten_a")
	base := sh.Detached() // other tests' clients of the tenant may be parked detached

	conn := n.dial(t, cred{"ten_a", id, allowAll, 0}, nil)
	r := rawConnect(t, conn, "det-proxied")
	waitFor(t, "the proxied connection detached", func() bool { return sh.Detached() > base })
	read := func(want packet.Type) {
		t.Helper()
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		fh, _, err := r.ReadPacket(0)
		if err != nil || fh.Type != want {
			t.Fatalf("want %v, got %v %v", want, fh.Type, err)
		}
	}
	writePacket(t, conn, &packet.Ping{Type: packet.TypePingreq}) // a wake-up for a PINGREQ alone: it detaches again
	read(packet.TypePingresp)
	waitFor(t, "the proxied connection detached again", func() bool { return sh.Detached() > base })
	// QoS 0: no acknowledgement, which the node's log would hand to a
	// writer goroutine after its fsync (write state: no detaching then
	// until the batch sweeps).
	writePacket(t, conn, &packet.Publish{Topic: []byte("det/x"), Payload: []byte("through a rebuilt socket")})
	expectMsg(t, got, "det/x=through a rebuilt socket")
	// A PINGREQ that wakes it from its park (not one that comes while
	// its reader still waits for more after the PUBLISH) detaches it.
	waitFor(t, "the proxied connection detached once more", func() bool {
		writePacket(t, conn, &packet.Ping{Type: packet.TypePingreq})
		read(packet.TypePingresp)
		for range 10 {
			if sh.Detached() > base {
				return true
			}
			time.Sleep(10 * time.Millisecond)
		}
		return false
	})

	ended := make(chan error, 1)
	go func() {
		_ = conn.SetReadDeadline(time.Now().Add(15 * time.Second))
		for {
			fh, body, err := r.ReadPacket(0)
			if err != nil {
				ended <- err
				return
			}
			if fh.Type == packet.TypeDisconnect {
				var d packet.Disconnect
				if err := d.Decode(packet.Version5, fh, body); err != nil || d.Reason != packet.ErrNotAuthorized {
					t.Errorf("DISCONNECT reason %v (%v), want 0x87", d.Reason, err)
				}
				ended <- nil
				return
			}
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		revokeAndNotify(t, n, id)
		select {
		case err := <-ended:
			if err != nil {
				t.Fatalf("connection ended without DISCONNECT 0x87: %v", err)
			}
			return
		case <-time.After(200 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatal("the detached connection of a revoked credential still open after 10 s")
			}
		}
	}
}

// revokeAndNotify revokes credential id in Postgres and NOTIFYs the
// node's listener; repeated until its effect shows, as the listener may
// attach after the first NOTIFY (a revocation is idempotent).
func revokeAndNotify(t *testing.T, n *testNode, id string) {
	t.Helper()
	ctx := context.Background()
	if _, err := n.pool.Exec(ctx, `UPDATE credentials SET revoked_at = now() WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := n.pool.Exec(ctx, `SELECT pg_notify('berth_credentials', $1)`, id); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
