package shard

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"berth.dev/broker/internal/topicrule"
	"berth.dev/broker/internal/wal"
	"berth.dev/broker/packet"
)

// meteredQuota is a Limiter that counts what it admits net of refunds, as
// the node's monthly messages quota does: a switch refuses (0x97), a size
// over maxSize disconnects (0x95), and a retained cap.
type meteredQuota struct {
	refuse      atomic.Bool
	maxSize     int64
	maxRetained int
	counted     atomic.Int64 // admitted minus refunded
}

func (q *meteredQuota) AdmitPublish(size int, _ byte) (packet.ReasonCode, time.Duration) {
	if q.maxSize > 0 && int64(size) > q.maxSize {
		return packet.ErrPacketTooLarge, 0
	}
	if q.refuse.Load() {
		return packet.ErrQuotaExceeded, 0
	}
	q.counted.Add(1)
	return packet.CodeSuccess, 0
}
func (q *meteredQuota) MaxSubscriptions() int           { return 0 }
func (q *meteredQuota) MaxRetained() (int, int64)       { return q.maxRetained, 0 }
func (q *meteredQuota) MaxMessageSize() int64           { return q.maxSize }
func (q *meteredQuota) AdmitWill(int) packet.ReasonCode { q.counted.Add(1); return packet.CodeSuccess }
func (q *meteredQuota) Refund()                         { q.counted.Add(-1) }

// TestOnlyAcceptedMessagesCount: every PUBLISH the shard reads counts in
// MessagesIn; only those it accepts count in MessagesAccepted, the count
// billing bills. Each kind of refusal is read and not accepted: not
// authorized (0x87, and a 3.1.1 publisher's, acknowledged all the same),
// the limiter's quota (0x97), a topic rule's rate (0x97), a payload not in
// its format (0x99), the retained quota (0x97), a failed log append (disk
// full, 0x97), a QoS 2 retransmission, a PUBLISH over the size quota
// (DISCONNECT 0x95) and RETAIN where a rule allows none (DISCONNECT 0x9A).
// The limiter's own count, net of the shard's refunds, is the accepted
// count too: the monthly quota counts what is billed.
func TestOnlyAcceptedMessagesCount(t *testing.T) {
	t.Parallel()
	dfs := &diskFS{}
	log, err := wal.Open(wal.Options{Dir: t.TempDir(), Fsync: wal.SyncInterval, FS: dfs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	q := &meteredQuota{maxSize: 1000, maxRetained: 1}
	b := startBroker(t, Options{MessageLog: log}, ConnInfo{Limiter: q, Authorizer: denyAuthorizer{pub: "secret/"}})
	rules, skipped := topicrule.NewSet([]topicrule.Rule{
		{ID: "top_rated", Filter: "rated/#", RetainedAllowed: true, MaxMsgsPerSec: 1},
		{ID: "top_plain", Filter: "plain/#"},
	}, nil)
	if len(skipped) > 0 {
		t.Fatalf("skipped %v", skipped)
	}
	b.shard.SetTopicRules(rules)

	var read, accepted uint64
	check := func(step string) {
		t.Helper()
		st := b.shard.Stats()
		if st.MessagesIn != read || st.MessagesAccepted != accepted || q.counted.Load() != int64(accepted) {
			t.Fatalf("after %s: messages in %d, accepted %d, the quota counted %d; want in %d, accepted %d (and counted)",
				step, st.MessagesIn, st.MessagesAccepted, q.counted.Load(), read, accepted)
		}
	}
	pub := v5Client(t, b, "pub")
	id := uint16(0)
	qos1 := func(p packet.Publish) packet.ReasonCode {
		t.Helper()
		id++
		p.QoS, p.PacketID = 1, id
		if p.Payload == nil {
			p.Payload = []byte("m")
		}
		pub.send(&p)
		read++
		return pub.ack(packet.TypePuback).Reason
	}
	wantCode := func(step string, got, want packet.ReasonCode) {
		t.Helper()
		if got != want && (want != packet.CodeSuccess || got >= 0x80) {
			t.Fatalf("%s: PUBACK %v, want %v", step, got, want)
		}
		if got < 0x80 {
			accepted++
		}
		check(step)
	}

	pub.send(&packet.Publish{Topic: []byte("ok/qos0"), Payload: []byte("0")})
	read++
	accepted++
	wantCode("accepted", qos1(packet.Publish{Topic: []byte("ok/qos1")}), packet.CodeSuccess)

	wantCode("not authorized", qos1(packet.Publish{Topic: []byte("secret/x")}), packet.ErrNotAuthorized)

	q.refuse.Store(true)
	wantCode("over the quota", qos1(packet.Publish{Topic: []byte("ok/x")}), packet.ErrQuotaExceeded)
	q.refuse.Store(false)

	// One a second on rated/#: of a quick burst, one is taken at most.
	var ruleRefused bool
	for i := 0; i < 5 && !ruleRefused; i++ {
		code := qos1(packet.Publish{Topic: []byte("rated/x")})
		ruleRefused = code == packet.ErrQuotaExceeded
		wantCode("a topic rule's rate", code, code)
	}
	if !ruleRefused {
		t.Fatal("rated/# at one message a second refused none of 5 quick messages")
	}

	bad := packet.Publish{Topic: []byte("ok/utf8"), Payload: []byte{0xff, 0xfe}}
	bad.Props.Has.Set(packet.PropPayloadFormat)
	bad.Props.PayloadFormat = 1
	wantCode("payload format", qos1(bad), packet.ErrPayloadFormatInvalid)

	wantCode("first retained", qos1(packet.Publish{Topic: []byte("ret/a"), Retain: true}), packet.CodeSuccess)
	wantCode("over the retained quota", qos1(packet.Publish{Topic: []byte("ret/b"), Retain: true}), packet.ErrQuotaExceeded)

	dfs.full.Store(true)
	wantCode("log append failed", qos1(packet.Publish{Topic: []byte("ok/disk")}), packet.ErrQuotaExceeded)
	dfs.full.Store(false)

	// QoS 2: the retransmission is acknowledged again, not taken again.
	for range 2 {
		pub.send(&packet.Publish{QoS: 2, PacketID: 500, Dup: true, Topic: []byte("ok/q2"), Payload: []byte("2")})
		read++
		if rec := pub.ack(packet.TypePubrec); rec.Reason >= 0x80 {
			t.Fatalf("QoS 2: PUBREC %v", rec.Reason)
		}
	}
	accepted++
	check("a QoS 2 message and its retransmission")
	pub.send(&packet.Ack{Type: packet.TypePubrel, PacketID: 500})
	pub.ack(packet.TypePubcomp)

	// An HTTP publish over the retained quota is refused unread; one
	// within it is read and accepted.
	if _, err := b.shard.PublishLimited("ret/c", []byte("h"), 1, true, packet.Properties{}, q); !errors.Is(err, ErrRetainedQuota) {
		t.Fatalf("HTTP publish over the retained quota: %v", err)
	}
	check("an HTTP publish over the retained quota")
	if _, err := b.shard.PublishLimited("ok/http", []byte("h"), 1, false, packet.Properties{}, q); err != nil {
		t.Fatal(err)
	}
	read++
	accepted++
	check("an HTTP publish")

	c3 := dialRaw(t, b.addr, packet.Version311)
	c3.connectOK("pub3")
	c3.send(&packet.Publish{QoS: 1, PacketID: 1, Topic: []byte("secret/3"), Payload: []byte("3")})
	read++
	if a := c3.ack(packet.TypePuback); a.Reason != packet.CodeSuccess {
		t.Fatalf("3.1.1 PUBACK %v", a.Reason)
	}
	check("a 3.1.1 PUBLISH not authorized, acknowledged")

	pub.send(&packet.Publish{QoS: 1, PacketID: 900, Topic: []byte("ok/big"), Payload: make([]byte, 1001)})
	read++
	pub.expectDisconnect(packet.ErrPacketTooLarge)
	check("a PUBLISH over the size quota")

	r := v5Client(t, b, "retainer")
	r.send(&packet.Publish{QoS: 1, PacketID: 1, Retain: true, Topic: []byte("plain/x"), Payload: []byte("r")})
	read++
	r.expectDisconnect(packet.ErrRetainNotSupported)
	check("RETAIN refused by a topic rule")
	t.Logf("%d PUBLISHes read, %d accepted", read, accepted)
}
