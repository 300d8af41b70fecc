package node

import (
	"context"
	"net"
	"testing"
	"time"

	"berth.dev/broker/internal/shard"
	"berth.dev/broker/packet"
)

// connectWill opens a connection as a gateway would and sends an MQTT 5
// CONNECT with a QoS 1 will; it returns the CONNACK's reason and the
// connection (closed already when refused).
func (n *testNode) connectWill(t *testing.T, c cred, id, topic string, payload []byte, retain bool) (packet.ReasonCode, net.Conn) {
	t.Helper()
	conn := n.dial(t, c, nil)
	_, ack := sendConnect(t, conn, &packet.Connect{Version: packet.Version5, CleanStart: true, KeepAlive: 30,
		ClientID: []byte(id), WillFlag: true, WillQoS: 1, WillRetain: retain, WillTopic: []byte(topic), WillPayload: payload})
	return ack.Reason, conn
}

// Wills pass the admission of a device's PUBLISH: the credential's ACL and
// the message size quota refuse the CONNECT; the tenant's rate, monthly and
// retained quotas, when the will is due, drop it (counted, dead-lettered).
func TestWillsPassTheTenantsAdmission(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	got := make(chan string, 256)
	sub := n.mqtt5(t, cred{"ten_a", "crd_sub", `{"pub":[],"sub":["#","$berth/dlq/#"]}`, 0}, "watch", got)
	subscribe(t, sub, "will/#")
	if rc := subscribe(t, sub, shard.DeadLetterPrefix+"#"); rc != 1 {
		t.Fatalf("subscribe %s#: reason %#x", shard.DeadLetterPrefix, rc)
	}
	tn, ok := n.lookup("ten_a")
	if !ok {
		t.Fatal("tenant not open")
	}
	drops := func() uint64 { return tn.sh.Stats().Dropped[shard.DropQuotaExceeded.String()] }
	device := cred{"ten_a", "crd_dev", `{"pub":["will/#","dev/#"],"sub":[]}`, 0}
	dropped := func(t *testing.T, id string, before uint64) {
		t.Helper()
		awaitMsg(t, got, shard.DeadLetterPrefix+"quota_exceeded=gone:"+id)
		if d := drops() - before; d != 1 {
			t.Fatalf("quota_exceeded drops +%d, want +1", d)
		}
	}

	t.Run("will topic outside the ACL: CONNACK 0x87", func(t *testing.T) {
		if code, _ := n.connectWill(t, device, "acl", "other/x", []byte("gone:acl"), false); code != packet.ErrNotAuthorized {
			t.Fatalf("CONNACK %v, want 0x87", code)
		}
	})

	t.Run("will over the message size quota: CONNACK 0x95", func(t *testing.T) {
		n.setQuota(t, "ten_a", "max_message_size", 16)
		defer n.setQuota(t, "ten_a", "max_message_size", 1<<20)
		if code, _ := n.connectWill(t, device, "big", "will/big", make([]byte, 17), false); code != packet.ErrPacketTooLarge {
			t.Fatalf("CONNACK %v, want 0x95", code)
		}
		code, conn := n.connectWill(t, device, "fits", "will/fits", []byte("gone:fits"), false)
		if code != packet.CodeSuccess {
			t.Fatalf("a will at the quota: CONNACK %v", code)
		}
		conn.Close()
		expectMsg(t, got, "will/fits=gone:fits")
	})

	t.Run("within quota: delivered, one message in", func(t *testing.T) {
		in := tn.sh.Stats().MessagesIn
		code, conn := n.connectWill(t, device, "ok", "will/ok", []byte("gone:ok"), false)
		if code != packet.CodeSuccess {
			t.Fatalf("CONNACK %v", code)
		}
		conn.Close()
		expectMsg(t, got, "will/ok=gone:ok")
		if d := tn.sh.Stats().MessagesIn - in; d != 1 {
			t.Fatalf("messages in +%d, want +1", d)
		}
	})

	t.Run("monthly messages used up: dropped", func(t *testing.T) {
		code, conn := n.connectWill(t, device, "month", "will/month", []byte("gone:month"), false)
		if code != packet.CodeSuccess {
			t.Fatalf("CONNACK %v", code)
		}
		n.setQuota(t, "ten_a", "monthly_messages", 1) // used up: the wills above counted
		defer n.setQuota(t, "ten_a", "monthly_messages", 1_000_000)
		before := drops()
		conn.Close()
		dropped(t, "month", before)
	})

	t.Run("retained over the retained quota: dropped", func(t *testing.T) {
		n.setQuota(t, "ten_a", "max_retained_messages", 1)
		defer n.setQuota(t, "ten_a", "max_retained_messages", 1000)
		if _, err := tn.sh.Publish("kept/one", []byte("x"), 0, true, packet.Properties{}); err != nil {
			t.Fatal(err)
		}
		code, conn := n.connectWill(t, device, "ret", "will/ret", []byte("gone:ret"), true)
		if code != packet.CodeSuccess {
			t.Fatalf("CONNACK %v", code)
		}
		before := drops()
		conn.Close()
		dropped(t, "ret", before)
		if r, err := tn.sh.RetainedMessages("will/#"); err != nil || len(r) != 0 {
			t.Fatalf("retained wills %v (%v), want none", r, err)
		}
	})

	t.Run("tenant rate spent: dropped", func(t *testing.T) {
		code, conn := n.connectWill(t, device, "rate", "will/rate", []byte("gone:rate"), false)
		if code != packet.CodeSuccess {
			t.Fatalf("CONNACK %v", code)
		}
		// A tenant byte rate of 1 byte/s, announced until the node has it in
		// force: its tenant bucket refuses the will's 9 bytes. (A publisher's
		// 0x97 does not say so: on Free its own rate, 20 messages/s, refuses
		// first, while the tenant's rate would still let the will through.)
		// The bucket never holds more than a second's bytes, so the will can
		// never pass it, however late the node gets to publish it: no race
		// with the refill.
		ctx := context.Background()
		if _, err := n.pool.Exec(ctx, `UPDATE quotas SET max_bytes_per_sec = 1 WHERE tenant_id = 'ten_a'`); err != nil {
			t.Fatal(err)
		}
		willSize := float64(len("gone:rate"))
		poll(t, 10*time.Second, "the tenant rate quota in force", func() bool {
			if _, err := n.pool.Exec(ctx, `SELECT pg_notify('berth_quotas', 'ten_a')`); err != nil {
				t.Fatal(err)
			}
			return !tn.limits.bytes.Take(time.Now(), willSize)
		})
		pub := n.mqtt5(t, cred{"ten_a", "crd_pub", allowAll, 0}, "pub", nil)
		if rc, err := publishQoS1(t, pub, "dev/x", []byte("xx"), false); err != nil || rc != byte(packet.ErrQuotaExceeded) {
			t.Fatalf("a publish at the spent tenant rate: %#x %v, want 0x97", rc, err)
		}
		before := drops()
		conn.Close()
		dropped(t, "rate", before)
	})
}

// awaitMsg waits up to 5 s for want, passing over other messages (the dead
// letters of a publisher's refused messages).
func awaitMsg(t *testing.T, got <-chan string, want string) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case m := <-got:
			if m == want {
				return
			}
		case <-deadline:
			t.Fatalf("no message %q within 5 s", want)
		}
	}
}
