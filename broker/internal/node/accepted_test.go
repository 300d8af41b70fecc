package node

import (
	"context"
	"testing"
	"time"

	"berth.dev/broker/internal/topicrule"
	"berth.dev/broker/packet"
)

// TestRefusedPublishesAreReadNotBilled: every PUBLISH the node reads is in
// the flushed usage's messages_in; only the accepted ones are in
// messages_accepted, the count billing bills, and in the monthly quota's
// count. Refused, each over a real connection: not authorized (0x87), a
// topic rule's rate (0x97), a payload not in its format (0x99), the
// retained quota (0x97), the client rate (0x97), the monthly quota (0x97)
// and the message size quota (DISCONNECT 0x95).
func TestRefusedPublishesAreReadNotBilled(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	ctx := context.Background()
	conn := n.dial(t, cred{"ten_a", "crd_a", `{"pub":["ok/#","rate/#"],"sub":["#"]}`, 0}, nil)
	c := &ruleConn{t: t, conn: conn, r: rawConnect(t, conn, "pub")}
	n.setQuota(t, "ten_a", "client_msgs_per_sec", 1000)
	tn, _ := n.lookup("ten_a")

	var read, accepted int64
	count := func(step string, ty packet.Type, rc packet.ReasonCode) {
		t.Helper()
		read++
		if ty == packet.TypePingresp || (ty == packet.TypePuback && rc < 0x80) {
			accepted++
		}
		if used := tn.limits.monthUsed.Load(); used != accepted {
			t.Fatalf("after %s (%v %#x): the monthly quota counted %d, %d accepted", step, ty, byte(rc), used, accepted)
		}
	}
	expect := func(step, topic string, size int, qos byte, retain bool, wantType packet.Type, want packet.ReasonCode) {
		t.Helper()
		ty, rc := c.publish(topic, size, qos, retain)
		if ty != wantType || (rc != want && (want != packet.CodeSuccess || rc >= 0x80)) {
			t.Fatalf("%s: %v %#x, want %v %#x", step, ty, byte(rc), wantType, byte(want))
		}
		count(step, ty, rc)
	}
	// untilRefused publishes until one is refused with 0x97 (at most 50).
	untilRefused := func(step, topic string) {
		t.Helper()
		for range 50 {
			ty, rc := c.publish(topic, 1, 1, false)
			count(step, ty, rc)
			if ty == packet.TypePuback && rc == packet.ErrQuotaExceeded {
				return
			}
			if ty != packet.TypePuback || rc >= 0x80 {
				t.Fatalf("%s: %v %#x", step, ty, byte(rc))
			}
		}
		t.Fatalf("%s: 50 messages, none refused", step)
	}

	expect("QoS 0", "ok/0", 1, 0, false, packet.TypePingresp, 0)
	for range 3 {
		expect("QoS 1", "ok/1", 1, 1, false, packet.TypePuback, packet.CodeSuccess)
	}
	expect("not authorized", "secret/x", 1, 1, false, packet.TypePuback, packet.ErrNotAuthorized)

	n.putRule(t, "ten_a", topicrule.Rule{ID: "top_rate", Filter: "rate/#", MaxMsgsPerSec: 1, RetainedAllowed: true})
	untilRefused("a topic rule's rate", "rate/x")

	// A payload that says it is UTF-8 and is not (0x99), after the quotas
	// admitted it: the quota gives its count back.
	bad := packet.Publish{QoS: 1, PacketID: 60000, Topic: []byte("ok/utf8"), Payload: []byte{0xff, 0xfe}}
	bad.Props.Has.Set(packet.PropPayloadFormat)
	bad.Props.PayloadFormat = 1
	b, err := bad.Append(nil, packet.Version5)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.conn.Write(b); err != nil {
		t.Fatal(err)
	}
	c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	fh, body, err := c.r.ReadPacket(0)
	var ack packet.Ack
	if err != nil || fh.Type != packet.TypePuback || ack.Decode(packet.Version5, fh, body) != nil || ack.Reason != packet.ErrPayloadFormatInvalid {
		t.Fatalf("payload format: %v %v %#x, want PUBACK 0x99", fh.Type, err, byte(ack.Reason))
	}
	count("payload format", fh.Type, ack.Reason)

	n.setQuota(t, "ten_a", "max_retained_messages", 1)
	expect("first retained", "ok/r1", 1, 1, true, packet.TypePuback, packet.CodeSuccess)
	expect("over the retained quota", "ok/r2", 1, 1, true, packet.TypePuback, packet.ErrQuotaExceeded)

	n.setQuota(t, "ten_a", "client_msgs_per_sec", 1)
	untilRefused("the client rate", "ok/rate")
	n.setQuota(t, "ten_a", "client_msgs_per_sec", 1000)
	// The connection's bucket follows the tenant's a moment later.
	deadline := time.Now().Add(5 * time.Second)
	for {
		ty, rc := c.publish("ok/again", 1, 1, false)
		count("after raising the client rate", ty, rc)
		if rc < 0x80 {
			break
		}
		if rc != packet.ErrQuotaExceeded || time.Now().After(deadline) {
			t.Fatalf("after raising the client rate: %v %#x", ty, byte(rc))
		}
		time.Sleep(20 * time.Millisecond)
	}

	// One message left this month, exactly: the quota counted what was
	// accepted, nothing refused.
	n.setQuota(t, "ten_a", "monthly_messages", accepted+1)
	expect("the month's last message", "ok/m", 1, 1, false, packet.TypePuback, packet.CodeSuccess)
	expect("over the monthly quota", "ok/m", 1, 1, false, packet.TypePuback, packet.ErrQuotaExceeded)
	n.setQuota(t, "ten_a", "monthly_messages", 1_000_000)

	n.setQuota(t, "ten_a", "max_message_size", 100)
	expect("over the size quota", "ok/big", 200, 1, false, packet.TypeDisconnect, packet.ErrPacketTooLarge)

	if err := n.flusher.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var in, acc int64
	if err := n.pool.QueryRow(ctx, `SELECT coalesce(sum(messages_in), 0), coalesce(sum(messages_accepted), 0) FROM usage
		WHERE tenant_id = 'ten_a'`).Scan(&in, &acc); err != nil {
		t.Fatal(err)
	}
	if in != read || acc != accepted {
		t.Fatalf("usage rows: %d messages in, %d accepted; the node read %d and accepted %d", in, acc, read, accepted)
	}
	t.Logf("%d PUBLISHes read, %d accepted and billed", read, accepted)
}

// TestMonthlyQuotaStartsFromAcceptedMessages: a tenant's shard opening
// mid-month takes the month's count so far from the usage rows' accepted
// messages, not from every PUBLISH read.
func TestMonthlyQuotaStartsFromAcceptedMessages(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	ctx := context.Background()
	if _, err := n.pool.Exec(ctx, `INSERT INTO usage (tenant_id, node_id, bucket, messages_in, messages_accepted)
		VALUES ('ten_b', 'node-old', date_trunc('minute', now()), 1000, 7)`); err != nil {
		t.Fatal(err)
	}
	if _, err := n.pool.Exec(ctx, `UPDATE quotas SET monthly_messages = 8 WHERE tenant_id = 'ten_b'`); err != nil {
		t.Fatal(err)
	}
	conn := n.dial(t, cred{"ten_b", "crd_b", allowAll, 0}, nil)
	c := &ruleConn{t: t, conn: conn, r: rawConnect(t, conn, "b")}
	c.expect("b/x", 1, 1, false, packet.TypePuback, packet.CodeNoMatchingSubscribers) // the 8th
	c.expect("b/x", 1, 1, false, packet.TypePuback, packet.ErrQuotaExceeded)
}
