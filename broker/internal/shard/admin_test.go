package shard

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"berth.dev/broker/internal/wal"
	"berth.dev/broker/packet"
)

func TestAdminPublish(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	c := v5Client(t, b, "admin-sub")
	c.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("api/#"), QoS: 1})
	tests := []struct {
		name    string
		topic   string
		wantErr error
		wantN   int
	}{
		{"delivered", "api/x", nil, 1},
		{"no subscriber", "other", nil, 0},
		{"wildcard", "api/+", ErrInvalidTopic, 0},
		{"$SYS", "$SYS/x", ErrInvalidTopic, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, err := b.shard.Publish(tc.topic, []byte("from http"), 1, false,
				packet.Properties{UserProperties: []packet.UserProperty{{Key: []byte("via"), Value: []byte("api")}}})
			if !errors.Is(err, tc.wantErr) || n != tc.wantN {
				t.Fatalf("Publish = %d, %v; want %d, %v", n, err, tc.wantN, tc.wantErr)
			}
		})
	}
	p := c.publish()
	if string(p.Topic) != "api/x" || string(p.Payload) != "from http" || len(p.Props.UserProperties) != 1 {
		t.Fatalf("got %+v", p)
	}
}

func TestAdminKick(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	c := dialRaw(t, b.addr, packet.Version5)
	c.connect(sessionConnect("kicked", 300, true))
	c.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("k"), QoS: 1})
	if err := b.shard.Kick("kicked", false); err != nil {
		t.Fatal(err)
	}
	c.expectDisconnect(packet.ErrAdministrativeAction)
	if st, ok := b.shard.SessionStats("kicked"); !ok || st.Subscriptions != 1 {
		t.Fatalf("kept session: %+v %v", st, ok)
	}
	if err := b.shard.Kick("kicked", true); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.shard.SessionStats("kicked"); ok {
		t.Fatal("session not discarded")
	}
	if err := b.shard.Kick("kicked", true); !errors.Is(err, ErrNoSession) {
		t.Fatalf("kick of a missing session: %v", err)
	}
}

// TestTopicRates: the live rates are a sliding window over the last
// rateSeconds seconds; reading them does not start a new window for the
// next reader.
func TestTopicRates(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	pub := v5Client(t, b, "rates-pub")
	for i := range 5 {
		pub.send(&packet.Publish{QoS: 1, PacketID: uint16(i + 1), Topic: []byte("rates/a"), Payload: []byte("0123456789")})
		pub.ack(packet.TypePuback)
	}
	read := func() TopicInfo {
		t.Helper()
		for _, ti := range b.shard.Topics() {
			if ti.Topic == "rates/a" {
				return ti
			}
		}
		t.Fatal("rates/a not listed")
		return TopicInfo{}
	}
	first, second := read(), read()
	if first.Messages != 5 || first.Bytes != 50 {
		t.Fatalf("totals %+v, want 5 messages, 50 bytes", first)
	}
	if first.MsgsPerSec == 0 || first.MsgsPerSec > 5.0/rateSeconds || first.BytesPerSec > 50.0/rateSeconds {
		t.Fatalf("first read %+v, want 0 < msgs/s <= 5/%d s", first, rateSeconds)
	}
	if second.MsgsPerSec != first.MsgsPerSec || second.BytesPerSec != first.BytesPerSec {
		t.Fatalf("second read %+v differs from the first %+v", second, first)
	}
}

func TestRateWindow(t *testing.T) {
	var w rateWindow
	for range 3 {
		w.add(100, 1, 10)
	}
	w.add(105, 1, 20)
	for _, c := range []struct {
		now      int64
		mps, bps float64
	}{
		{99, 0, 0},
		{100, 0.3, 3},
		{105, 0.4, 5},
		{109, 0.4, 5},
		{110, 0.1, 2}, // second 100 has left the window
		{114, 0.1, 2},
		{115, 0, 0},
	} {
		if mps, bps := w.rates(c.now); mps != c.mps || bps != c.bps {
			t.Errorf("rates(%d) = %v, %v; want %v, %v", c.now, mps, bps, c.mps, c.bps)
		}
	}
	w.add(110, 1, 7) // reuses second 100's slot: its old count goes
	if mps, bps := w.rates(110); mps != 0.2 || bps != 2.7 {
		t.Errorf("after reuse: %v, %v; want 0.2, 2.7", mps, bps)
	}
	if n := testing.AllocsPerRun(100, func() { w.add(111, 1, 1) }); n != 0 {
		t.Errorf("add allocates %v times", n)
	}
}

// TestSessionsOffline: an offline persistent session lists the messages it
// holds in the message log as queued, and the protocol version of its last
// connection.
func TestSessionsOffline(t *testing.T) {
	t.Parallel()
	for _, version := range []byte{packet.Version311, packet.Version5} {
		t.Run(fmt.Sprint(version), func(t *testing.T) {
			t.Parallel()
			b := startBrokerWith(t, newDurableShard(openWALStore(t, t.TempDir(), wal.SyncNever)))
			sub := dialRaw(t, b.addr, version)
			cp := sessionConnect("offline-holder", 3600, true)
			if version == packet.Version311 {
				cp = &packet.Connect{ClientID: []byte("offline-holder")} // clean session 0: persistent
			}
			sub.connect(cp)
			sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("held/#"), QoS: 1})
			sub.send(&packet.Disconnect{})
			eventually(t, "session offline", func() bool {
				ss, ok := b.shard.SessionStats("offline-holder")
				return ok && !ss.Connected
			})
			pub := v5Client(t, b, "offline-pub")
			for i := range 3 {
				pub.send(&packet.Publish{QoS: 1, PacketID: uint16(i + 1), Topic: []byte("held/x"), Payload: []byte("m")})
				pub.ack(packet.TypePuback)
			}
			var got SessionInfo
			for _, si := range b.shard.Sessions() {
				if si.ClientID == "offline-holder" {
					got = si
				}
			}
			if got.Connected || got.ConnectedAt != nil || got.QueuedMessages != 3 || got.ProtocolVersion != version || got.Subscriptions != 1 {
				t.Fatalf("session %+v, want offline with 3 queued, protocol version %d", got, version)
			}
		})
	}
}

// TestByteMeters: bytes in and out count every MQTT packet whole, fixed
// header included (CONNECT with its password, acknowledgements, pings), as
// it crossed the client's socket.
func TestByteMeters(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	c := dialRaw(t, b.addr, packet.Version5)
	var in, out int
	send := func(p appender) {
		t.Helper()
		buf, err := p.Append(nil, packet.Version5)
		if err != nil {
			t.Fatal(err)
		}
		in += len(buf)
		c.sendBytes(buf)
	}
	read := func(want packet.Type) {
		t.Helper()
		fh, _ := c.read(want)
		out += fh.Size()
	}
	send(&packet.Connect{ClientID: []byte("meter"), CleanStart: true, UsernameFlag: true, Username: []byte("crd_x"),
		PasswordFlag: true, Password: bytes.Repeat([]byte("t"), 300)}) // a token-sized password: a 2-byte remaining length
	read(packet.TypeConnack)
	send(&packet.Publish{QoS: 1, PacketID: 1, Topic: []byte("m/x"), Payload: bytes.Repeat([]byte("p"), 200)})
	read(packet.TypePuback)
	send(&packet.Ping{Type: packet.TypePingreq})
	read(packet.TypePingresp)
	eventually(t, "byte meters", func() bool {
		st := b.shard.Stats()
		return st.BytesIn == uint64(in) && st.BytesOut == uint64(out)
	})
}
