package node

import (
	"context"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"berth.dev/broker/packet"
	"berth.dev/testenv"
)

// persistent5 connects a paho client for credential c with a persistent
// session (Session Expiry 1 h) and returns it with the CONNACK.
func (n *testNode) persistent5(t *testing.T, c cred, clientID string, clean bool, got chan<- string) (*paho.Client, *paho.Connack) {
	t.Helper()
	expiry := uint32(3600)
	cl := paho.NewClient(paho.ClientConfig{Conn: n.dial(t, c, nil),
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(p paho.PublishReceived) (bool, error) {
			if got != nil {
				got <- p.Packet.Topic + "=" + string(p.Packet.Payload)
			}
			return true, nil
		}},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ack, err := cl.Connect(ctx, &paho.Connect{ClientID: clientID, KeepAlive: 30, CleanStart: clean,
		Username: c.id, UsernameFlag: true, Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}})
	if ack == nil {
		t.Fatalf("connect %s as %s: %v", clientID, c.id, err)
	}
	if ack.ReasonCode == 0 {
		t.Cleanup(func() { _ = cl.Disconnect(&paho.Disconnect{}) })
	}
	return cl, ack
}

// A sibling credential of the same tenant cannot take a device's session:
// CONNACK 0x85 (MQTT 5) or return code 2 (3.1.1), clean start or not, and
// the owner keeps receiving on its session.
func TestSiblingCredentialCannotTakeASession(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	owner := cred{"ten_a", "crd_owner", allowAll, 0}
	sibling := cred{"ten_a", "crd_sibling", allowAll, 0}
	got := make(chan string, 10)
	cl, ack := n.persistent5(t, owner, "device-1", true, got)
	if ack.ReasonCode != 0 {
		t.Fatalf("owner CONNACK %#x", ack.ReasonCode)
	}
	subscribe(t, cl, "dev/#")

	for _, version := range []byte{packet.Version5, packet.Version311} {
		for _, clean := range []bool{false, true} {
			conn := n.dial(t, sibling, nil)
			cp := &packet.Connect{Version: version, CleanStart: clean, KeepAlive: 30, ClientID: []byte("device-1")}
			if version == packet.Version5 {
				cp.Props.Has.Set(packet.PropSessionExpiry)
				cp.Props.SessionExpiry = 3600
			}
			_, ack := sendConnect(t, conn, cp)
			if ack.Reason != packet.ErrClientIDNotValid || ack.SessionPresent {
				t.Fatalf("version %d clean %v: sibling CONNACK %#x present %v, want 0x85 (3.1.1: 2)",
					version, clean, byte(ack.Reason), ack.SessionPresent)
			}
		}
	}
	// Through paho too, the sibling is refused with 0x85.
	if _, ack := n.persistent5(t, sibling, "device-1", false, nil); ack.ReasonCode != byte(packet.ErrClientIDNotValid) {
		t.Fatalf("paho sibling CONNACK %#x, want 0x85", ack.ReasonCode)
	}

	pub := n.mqtt5(t, sibling, "pub", nil)
	if rc := publish(t, pub, "dev/x", "still mine"); rc != 0 {
		t.Fatalf("publish: %#x", rc)
	}
	expectMsg(t, got, "dev/x=still mine")
}

// Revoking a credential deletes its offline persistent session with its
// queue: a new credential connecting with the client id then starts fresh
// (session present 0) and gets nothing queued for the old one.
func TestRevocationDeletesOfflineSessions(t *testing.T) {
	t.Parallel()
	n := startNodeWith(t, testenv.DatabaseURL(t), t.TempDir(), true)
	ctx := context.Background()
	const doomed = "crd_revoked_sess"
	if _, err := n.pool.Exec(ctx, `INSERT INTO credentials (id, tenant_id, name, acl) VALUES ($1, 'ten_a', 'r', '{}')`, doomed); err != nil {
		t.Fatal(err)
	}
	old := cred{"ten_a", doomed, allowAll, 0}
	cl, ack := n.persistent5(t, old, "device-9", true, nil)
	if ack.ReasonCode != 0 {
		t.Fatalf("CONNACK %#x", ack.ReasonCode)
	}
	subscribe(t, cl, "jobs/#")
	_ = cl.Disconnect(&paho.Disconnect{})
	other := cred{"ten_a", "crd_other", allowAll, 0}
	pub := n.mqtt5(t, other, "pub", nil)
	publish(t, pub, "jobs/1", "for the revoked device")
	sh := n.shardOf(t, "ten_a")
	if _, ok := sh.SessionStats("device-9"); !ok {
		t.Fatal("offline session missing before the revocation")
	}

	// The listener may attach after the first NOTIFY; repeat it until the
	// session goes (a revocation is idempotent).
	deadline := time.Now().Add(10 * time.Second)
	for {
		revokeAndNotify(t, n, doomed)
		time.Sleep(100 * time.Millisecond)
		if _, ok := sh.SessionStats("device-9"); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("offline session of a revoked credential still there after 10 s")
		}
	}

	got := make(chan string, 10)
	_, ack = n.persistent5(t, cred{"ten_a", "crd_new", allowAll, 0}, "device-9", false, got)
	if ack.ReasonCode != 0 || ack.SessionPresent {
		t.Fatalf("new credential: CONNACK %#x present %v, want a fresh session", ack.ReasonCode, ack.SessionPresent)
	}
	expectNone(t, got, 200*time.Millisecond)
}
