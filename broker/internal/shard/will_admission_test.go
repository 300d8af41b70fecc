package shard

import (
	"sync/atomic"
	"testing"
	"time"

	"berth.dev/broker/packet"
)

// willQuota is a Limiter for the will tests: a message size quota,
// retained caps, and a switch that refuses wills when they are due.
type willQuota struct {
	maxSize     int64
	maxRetained int
	refuse      atomic.Bool
	admitted    atomic.Int64 // wills admitted
}

func (q *willQuota) AdmitPublish(int, byte) (packet.ReasonCode, time.Duration) {
	return packet.CodeSuccess, 0
}
func (q *willQuota) MaxSubscriptions() int     { return 0 }
func (q *willQuota) MaxRetained() (int, int64) { return q.maxRetained, 0 }
func (q *willQuota) MaxMessageSize() int64     { return q.maxSize }
func (q *willQuota) AdmitWill(int) packet.ReasonCode {
	if q.refuse.Load() {
		return packet.ErrQuotaExceeded
	}
	q.admitted.Add(1)
	return packet.CodeSuccess
}

// The CONNECT-time half of a will's admission: a will topic the client
// may not publish to, a payload over the message size quota or not in
// the format it claims refuses the CONNECT with the protocol's code.
func TestWillRefusedAtConnect(t *testing.T) {
	t.Parallel()
	q := &willQuota{maxSize: 8}
	b := startBroker(t, Options{}, ConnInfo{Limiter: q, Authorizer: denyAuthorizer{pub: "will/forbidden"}})
	tests := []struct {
		name    string
		version byte
		change  func(cp *packet.Connect)
		want    packet.ReasonCode
	}{
		{"outside the ACL", packet.Version5, func(cp *packet.Connect) { cp.WillTopic = []byte("will/forbidden") }, packet.ErrNotAuthorized},
		{"$SYS", packet.Version5, func(cp *packet.Connect) { cp.WillTopic = []byte("$SYS/broker/uptime") }, packet.ErrNotAuthorized},
		{"dead-letter topic", packet.Version5, func(cp *packet.Connect) { cp.WillTopic = []byte(DeadLetterPrefix + "quota_exceeded") }, packet.ErrNotAuthorized},
		{"3.1.1 $SYS: return code 5", packet.Version311, func(cp *packet.Connect) { cp.WillTopic = []byte("$SYS/x") }, packet.ErrNotAuthorized},
		{"over the size quota", packet.Version5, func(cp *packet.Connect) { cp.WillPayload = []byte("123456789") }, packet.ErrPacketTooLarge},
		// 3.1.1 has no Packet too large: return code 3, server unavailable.
		{"3.1.1 over the size quota", packet.Version311, func(cp *packet.Connect) { cp.WillPayload = []byte("123456789") }, packet.ErrServerUnavailable},
		{"not the UTF-8 it claims", packet.Version5, func(cp *packet.Connect) {
			cp.WillProps.Has.Set(packet.PropPayloadFormat)
			cp.WillProps.PayloadFormat = 1
			cp.WillPayload = []byte{0xff, 0xfe}
		}, packet.ErrPayloadFormatInvalid},
		{"at the size quota", packet.Version5, func(cp *packet.Connect) { cp.WillPayload = []byte("12345678") }, packet.CodeSuccess},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, b.addr, tc.version)
			cp := willConnect("wc", tc.version, 0, 0)
			cp.WillPayload = []byte("short")
			tc.change(cp)
			if ack := c.connect(cp); ack.Reason != tc.want {
				t.Fatalf("CONNACK %v, want %v", ack.Reason, tc.want)
			}
			if tc.want != packet.CodeSuccess {
				c.expectClosed()
			} else {
				c.send(&packet.Disconnect{})
			}
		})
	}
}

// The half of a will's admission that depends on when it is due: over
// the tenant's quotas then, it is dropped, counted, and dead-lettered;
// within them it is delivered and counted as a message in.
func TestWillAdmittedWhenDue(t *testing.T) {
	t.Parallel()
	q := &willQuota{maxRetained: 1}
	var traffic Traffic
	b := startBroker(t, Options{DeadLetters: true}, ConnInfo{Limiter: q, Traffic: &traffic})
	watch := v5Client(t, b, "watch")
	watch.subscribe(1, packet.Properties{},
		packet.Subscription{Filter: []byte("will/#"), QoS: 1},
		packet.Subscription{Filter: []byte(DeadLetterPrefix + "#"), QoS: 1})
	next := func() *packet.Publish {
		t.Helper()
		p := watch.publish()
		watch.send(&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID})
		return p
	}
	dropped := func() uint64 { return b.shard.Stats().Dropped[DropQuotaExceeded.String()] }
	userProp := func(p *packet.Publish, key string) string {
		for _, up := range p.Props.UserProperties {
			if string(up.Key) == key {
				return string(up.Value)
			}
		}
		return ""
	}

	t.Run("within quota: delivered and counted", func(t *testing.T) {
		in, credIn := b.shard.Stats().MessagesIn, traffic.MessagesIn.Load()
		c := dialRaw(t, b.addr, packet.Version5)
		c.connect(willConnect("ok", packet.Version5, 0, 0))
		_ = c.nc.Close()
		if p := next(); string(p.Topic) != "will/ok" || string(p.Payload) != "gone:ok" {
			t.Fatalf("got %s %q", p.Topic, p.Payload)
		}
		if got := b.shard.Stats().MessagesIn - in; got != 1 {
			t.Fatalf("messages in +%d, want +1", got)
		}
		if got := traffic.MessagesIn.Load() - credIn; got != 1 {
			t.Fatalf("the connection's messages in +%d, want +1", got)
		}
	})

	t.Run("over quota: dropped and dead-lettered", func(t *testing.T) {
		q.refuse.Store(true)
		defer q.refuse.Store(false)
		in, before := b.shard.Stats().MessagesIn, dropped()
		c := dialRaw(t, b.addr, packet.Version5)
		c.connect(willConnect("over", packet.Version5, 0, 0))
		_ = c.nc.Close()
		p := next()
		if string(p.Topic) != DeadLetterPrefix+"quota_exceeded" || string(p.Payload) != "gone:over" ||
			userProp(p, "berth-dlq-topic") != "will/over" || userProp(p, "berth-dlq-client") != "over" {
			t.Fatalf("dead letter %s %q %+v", p.Topic, p.Payload, p.Props.UserProperties)
		}
		if got := dropped() - before; got != 1 {
			t.Fatalf("quota_exceeded drops +%d, want +1", got)
		}
		if got := b.shard.Stats().MessagesIn - in; got != 0 {
			t.Fatalf("messages in +%d for a dropped will, want 0", got)
		}
	})

	t.Run("delayed: admitted when the delay passes, not at disconnect", func(t *testing.T) {
		before := dropped()
		c := dialRaw(t, b.addr, packet.Version5)
		c.connect(willConnect("late", packet.Version5, 1, 60))
		_ = c.nc.Close()
		eventually(t, "offline", func() bool { st, _ := b.shard.SessionStats("late"); return !st.Connected })
		q.refuse.Store(true) // the quota runs out during the delay
		defer q.refuse.Store(false)
		if p := next(); string(p.Topic) != DeadLetterPrefix+"quota_exceeded" || userProp(p, "berth-dlq-topic") != "will/late" {
			t.Fatalf("got %s %+v, want the will's dead letter", p.Topic, p.Props.UserProperties)
		}
		if got := dropped() - before; got != 1 {
			t.Fatalf("quota_exceeded drops +%d, want +1", got)
		}
	})

	t.Run("retained over the retained cap: dropped", func(t *testing.T) {
		if _, err := b.shard.Publish("kept/one", []byte("x"), 0, true, packet.Properties{}); err != nil {
			t.Fatal(err)
		}
		before := dropped()
		c := dialRaw(t, b.addr, packet.Version5)
		cp := willConnect("ret", packet.Version5, 0, 0)
		cp.WillRetain = true
		c.connect(cp)
		_ = c.nc.Close()
		if p := next(); string(p.Topic) != DeadLetterPrefix+"quota_exceeded" || userProp(p, "berth-dlq-topic") != "will/ret" {
			t.Fatalf("got %s %+v, want the will's dead letter", p.Topic, p.Props.UserProperties)
		}
		if got := dropped() - before; got != 1 {
			t.Fatalf("quota_exceeded drops +%d, want +1", got)
		}
		if n := b.shard.Stats().Retained; n != 1 {
			t.Fatalf("%d retained messages, want 1", n)
		}
	})
}
