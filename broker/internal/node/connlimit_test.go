package node

import (
	"io"
	"net"
	"testing"
	"time"

	"berth.dev/broker/packet"
)

// The node enforces a tenant's max_connections on its own: the backstop
// of the gateways' global limit when Redis is unreachable and they admit
// without it (gateway/internal/connlimit, fail-open). Over the limit a
// CONNECT gets CONNACK 0x97 (3.1.1: 3); a freed slot admits again, and the
// quota follows live changes.
func TestMaxConnectionsIsEnforcedPerNode(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	c := cred{"ten_a", "crd_a", allowAll, 0}
	n.mqtt5(t, c, "warm-up", nil) // opens the shard
	n.setQuota(t, "ten_a", "max_connections", 2)

	connack := func(id string, version byte) (net.Conn, byte) {
		t.Helper()
		conn := n.dial(t, c, nil)
		b, err := (&packet.Connect{ProtocolName: []byte("MQTT"), Version: version, CleanStart: true, KeepAlive: 30, ClientID: []byte(id)}).Append(nil, version)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write(b); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		ack := make([]byte, 4)
		if _, err := io.ReadFull(conn, ack); err != nil {
			t.Fatalf("%s: no CONNACK: %v", id, err)
		}
		if ack[0] != 0x20 {
			t.Fatalf("%s: first packet %x, want a CONNACK", id, ack)
		}
		return conn, ack[3]
	}
	// warm-up is 1 of 2.
	second, rc := connack("second", packet.Version5)
	if rc != 0 {
		t.Fatalf("2nd connection of 2: CONNACK %#x", rc)
	}
	if _, rc := connack("third", packet.Version5); rc != 0x97 {
		t.Fatalf("3rd connection of 2: CONNACK %#x, want 0x97", rc)
	}
	if _, rc := connack("third-311", packet.Version311); rc != 3 {
		t.Fatalf("3rd connection of 2 (3.1.1): return code %d, want 3 (server unavailable)", rc)
	}
	second.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, rc := connack("after-close", packet.Version5)
		if rc == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after one of 2 closed: still CONNACK %#x", rc)
		}
		time.Sleep(20 * time.Millisecond)
	}
	n.setQuota(t, "ten_a", "max_connections", 3)
	if _, rc := connack("raised", packet.Version5); rc != 0 {
		t.Fatalf("3rd connection after the quota rose to 3: CONNACK %#x", rc)
	}
}
