package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"berth.dev/broker/packet"
)

// The message size quota bounds a PUBLISH's payload, live: raising it lets
// the same connection send a larger message than the shard opened with, a
// payload at the quota passes whatever its topic's length, and the next
// CONNACK announces the packet size that goes with the new quota.
func TestMessageSizeQuotaFollowsTheQuotaLive(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	cl := n.mqtt5(t, cred{"ten_a", "crd_a", allowAll, 0}, "big", nil) // the shard opens on the free plan's 64 KiB

	// The byte rates must allow the large message too; they land with the
	// same NOTIFY as the size quota.
	if _, err := n.pool.Exec(context.Background(), `UPDATE quotas SET client_bytes_per_sec = $1, max_bytes_per_sec = $1 WHERE tenant_id = 'ten_a'`, 4<<20); err != nil {
		t.Fatal(err)
	}
	n.setQuota(t, "ten_a", "max_message_size", 200_000)
	// The rate buckets refill towards their raised burst: a refusal (0x97)
	// may come first; a disconnect (an error here) would be the size bound.
	for deadline := time.Now().Add(3 * time.Second); ; {
		rc, err := publishQoS1(t, cl, "size/raised", make([]byte, 150_000), false)
		if err != nil {
			t.Fatalf("150 kB publish under a raised 200 kB quota: %v", err)
		}
		if rc < 0x80 { // success, or 0x10 no matching subscribers
			break
		}
		if rc != byte(packet.ErrQuotaExceeded) || time.Now().After(deadline) {
			t.Fatalf("150 kB publish under a raised 200 kB quota: reason %#x", rc)
		}
		time.Sleep(100 * time.Millisecond)
	}
	conn := n.dial(t, cred{"ten_a", "crd_a", allowAll, 0}, nil)
	_, ack := sendConnect(t, conn, &packet.Connect{Version: packet.Version5, CleanStart: true, KeepAlive: 30, ClientID: []byte("announce")})
	if got, want := ack.Props.MaximumPacketSize, uint32(200_000+packetHeadroom); got != want {
		t.Fatalf("CONNACK Maximum Packet Size %d after the raise, want %d", got, want)
	}

	n.setQuota(t, "ten_a", "max_message_size", 1000)
	long := "size/" + strings.Repeat("t", 2000) // the packet is far over 1000 bytes, the payload is not
	if rc, err := publishQoS1(t, cl, long, make([]byte, 1000), false); err != nil || rc >= 0x80 {
		t.Fatalf("payload at the quota on a long topic: reason %#x, %v", rc, err)
	}
	raw := n.dial(t, cred{"ten_a", "crd_a", allowAll, 0}, nil)
	r := rawConnect(t, raw, "over")
	b, _ := (&packet.Publish{Topic: []byte("size/over"), Payload: make([]byte, 1001)}).Append(nil, packet.Version5)
	raw.Write(b)
	expectDisconnect(t, r, packet.ErrPacketTooLarge)
}
