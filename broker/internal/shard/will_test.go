package shard

import (
	"testing"
	"time"

	"berth.dev/broker/packet"
)

func willConnect(id string, version byte, delay, expiry uint32) *packet.Connect {
	c := &packet.Connect{ClientID: []byte(id), CleanStart: true, WillFlag: true, WillQoS: 1, WillRetain: false,
		WillTopic: []byte("will/" + id), WillPayload: []byte("gone:" + id)}
	if version == packet.Version5 {
		c.WillProps.ContentType = []byte("text/plain")
		c.WillProps.UserProperties = []packet.UserProperty{{Key: []byte("k"), Value: []byte("v")}}
		if delay > 0 {
			c.WillProps.Has.Set(packet.PropWillDelay)
			c.WillProps.WillDelay = delay
		}
		if expiry > 0 {
			c.Props.Has.Set(packet.PropSessionExpiry)
			c.Props.SessionExpiry = expiry
		}
	}
	return c
}

func TestWill(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	watch := v5Client(t, b, "will-watch")
	watch.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("will/#"), QoS: 1})

	tests := []struct {
		name    string
		version byte
		delay   uint32
		expiry  uint32
		end     func(c *rawClient)
		want    bool
		minWait time.Duration
	}{
		{name: "v5 abnormal close", version: packet.Version5, end: func(c *rawClient) { _ = c.nc.Close() }, want: true},
		{name: "v5 normal DISCONNECT", version: packet.Version5, end: func(c *rawClient) { c.send(&packet.Disconnect{}) }},
		{name: "v5 DISCONNECT with will", version: packet.Version5,
			end: func(c *rawClient) { c.send(&packet.Disconnect{Reason: packet.CodeDisconnectWithWill}) }, want: true},
		{name: "v5 protocol error", version: packet.Version5,
			end: func(c *rawClient) { c.sendBytes([]byte{0x00, 0x00}) }, want: true},
		{name: "v5 delay ends with the session", version: packet.Version5, delay: 30,
			end: func(c *rawClient) { _ = c.nc.Close() }, want: true},
		{name: "v5 delay passes", version: packet.Version5, delay: 1, expiry: 60,
			end: func(c *rawClient) { _ = c.nc.Close() }, want: true, minWait: 900 * time.Millisecond},
		{name: "v3 abnormal close", version: packet.Version311, end: func(c *rawClient) { _ = c.nc.Close() }, want: true},
		{name: "v3 DISCONNECT", version: packet.Version311, end: func(c *rawClient) { c.send(&packet.Disconnect{}) }},
	}
	for _, tc := range tests {
		// Sequential: the watcher reads one will at a time.
		t.Run(tc.name, func(t *testing.T) {
			id := "w" + string(rune('a'+len(tc.name)%26)) + tc.name[:2] + string(rune('0'+tc.delay%10))
			c := dialRaw(t, b.addr, tc.version)
			if ack := c.connect(willConnect(id, tc.version, tc.delay, tc.expiry)); ack.Reason != packet.CodeSuccess {
				t.Fatalf("CONNACK %v", ack.Reason)
			}
			start := time.Now()
			tc.end(c)
			if !tc.want {
				watch.expectSilence(200 * time.Millisecond) // [MQTT-3.14.4-3]
				return
			}
			p := watch.publish() // [MQTT-3.1.2-8]
			watch.send(&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID})
			if string(p.Topic) != "will/"+id || string(p.Payload) != "gone:"+id || p.QoS != 1 {
				t.Fatalf("will %s %q qos %d", p.Topic, p.Payload, p.QoS)
			}
			if tc.version == packet.Version5 && (string(p.Props.ContentType) != "text/plain" || len(p.Props.UserProperties) != 1) {
				t.Fatalf("will properties not passed on: %+v", p.Props)
			}
			if el := time.Since(start); el < tc.minWait {
				t.Fatalf("will after %v, want at least %v", el, tc.minWait)
			}
		})
	}
	t.Run("v5 reconnect within the delay cancels it", func(t *testing.T) {
		c := dialRaw(t, b.addr, packet.Version5)
		c.connect(willConnect("cancel", packet.Version5, 1, 60))
		_ = c.nc.Close()
		eventually(t, "offline", func() bool { st, _ := b.shard.SessionStats("cancel"); return !st.Connected })
		again := dialRaw(t, b.addr, packet.Version5)
		cp := sessionConnect("cancel", 60, false)
		again.connect(cp) // [MQTT-3.1.3-9]
		watch.expectSilence(1300 * time.Millisecond)
	})
}

func TestWillRetainedAndRefused(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{Authorizer: denyAuthorizer{pub: "will/forbidden"}})
	t.Run("will topic not authorized", func(t *testing.T) {
		c := dialRaw(t, b.addr, packet.Version5)
		if ack := c.connect(willConnect("forbidden", packet.Version5, 0, 0)); ack.Reason != packet.ErrNotAuthorized {
			t.Fatalf("CONNACK %v", ack.Reason)
		}
	})
	t.Run("retained will", func(t *testing.T) {
		c := dialRaw(t, b.addr, packet.Version5)
		cp := willConnect("keeper", packet.Version5, 0, 0)
		cp.WillRetain = true
		c.connect(cp)
		_ = c.nc.Close()
		eventually(t, "will retained", func() bool { return b.shard.Stats().Retained == 1 })
		late := v5Client(t, b, "late-watch")
		late.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("will/#"), QoS: 1})
		if p := late.publish(); !p.Retain || string(p.Payload) != "gone:keeper" {
			t.Fatalf("retained will %q retain=%v", p.Payload, p.Retain)
		}
	})
}
