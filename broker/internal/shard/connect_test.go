package shard

import (
	"bytes"
	"testing"
	"time"

	"berth.dev/broker/packet"
)

func TestConnackProperties(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{MaxPacketSize: 4096, ReceiveMaximum: 10, TopicAliasMaximum: 5, MaxKeepAlive: 30,
		MaxSessionExpiry: 60}, ConnInfo{})
	c := dialRaw(t, b.addr, packet.Version5)
	ack := c.connect(sessionConnect("", 3600, true)) // empty id: the server assigns one
	p := ack.Props
	checks := []struct {
		name string
		ok   bool
	}{
		{"reason success", ack.Reason == packet.CodeSuccess},
		{"no session present", !ack.SessionPresent},
		{"receive maximum 10", p.Has.Has(packet.PropReceiveMaximum) && p.ReceiveMaximum == 10},
		{"maximum packet size 4096", p.MaximumPacketSize == 4096},
		{"topic alias maximum 5", p.TopicAliasMaximum == 5},
		{"retain available", p.Has.Has(packet.PropRetainAvailable) && p.RetainAvailable == 1},
		{"wildcard available", p.WildcardSubAvailable == 1},
		{"subscription ids available", p.SubIDAvailable == 1},
		{"shared available", p.SharedSubAvailable == 1},
		{"maximum QoS absent (2)", !p.Has.Has(packet.PropMaximumQoS)},
		{"assigned client id", bytes.HasPrefix(p.AssignedClientID, []byte("berth-"))},
		{"server keep alive 30", p.Has.Has(packet.PropServerKeepAlive) && p.ServerKeepAlive == 30},
		{"session expiry capped to 60", p.Has.Has(packet.PropSessionExpiry) && p.SessionExpiry == 60},
	}
	for _, ch := range checks {
		if !ch.ok {
			t.Errorf("%s: CONNACK %+v", ch.name, ack)
		}
	}
}

func TestConnectRefusals(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{
		Authenticate: func(u, p []byte) bool { return string(u) == "user" && string(p) == "secret" },
	})
	tests := []struct {
		name    string
		version byte
		connect []byte
		want    packet.ReasonCode // CONNACK reason; 0 with wantV3 for 3.1.1
		wantV3  byte
	}{
		{
			name: "v5 anonymous not allowed", version: packet.Version5,
			connect: encode(t, &packet.Connect{ClientID: []byte("a"), CleanStart: true}, packet.Version5),
			want:    packet.ErrNotAuthorized,
		},
		{
			name: "v5 bad password", version: packet.Version5,
			connect: encode(t, &packet.Connect{ClientID: []byte("a"), Username: []byte("user"), Password: []byte("nope")}, packet.Version5),
			want:    packet.ErrBadUsernameOrPassword,
		},
		{
			name: "v5 enhanced auth method", version: packet.Version5,
			connect: encode(t, &packet.Connect{ClientID: []byte("a"), Username: []byte("user"), Password: []byte("secret"),
				Props: packet.Properties{AuthMethod: []byte("SCRAM-SHA-1")}}, packet.Version5),
			want: packet.ErrBadAuthMethod,
		},
		{
			name: "v5 reserved connect flag", version: packet.Version5,
			connect: patch(encode(t, &packet.Connect{ClientID: []byte("a")}, packet.Version5), 9, 0x01),
			want:    packet.ErrMalformed,
		},
		{
			name: "v3 anonymous not allowed", version: packet.Version311,
			connect: encode(t, &packet.Connect{ClientID: []byte("a"), CleanStart: true}, packet.Version311),
			wantV3:  packet.ConnackNotAuthorized,
		},
		{
			name: "v3 bad password", version: packet.Version311,
			connect: encode(t, &packet.Connect{ClientID: []byte("a"), Username: []byte("user"), Password: []byte("x")}, packet.Version311),
			wantV3:  packet.ConnackBadUsernameOrPassword,
		},
		{
			name: "v3 empty client id without clean session", version: packet.Version311,
			connect: encode(t, &packet.Connect{Username: []byte("user"), Password: []byte("secret")}, packet.Version311),
			wantV3:  packet.ConnackIdentifierRejected, // [MQTT-3.1.3-8]
		},
		{
			name: "unsupported protocol level", version: packet.Version311,
			connect: patch(encode(t, &packet.Connect{ClientID: []byte("a")}, packet.Version311), 8, 0x06),
			wantV3:  packet.ConnackBadProtocolVersion, // [MQTT-3.1.2-2]
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := dialRaw(t, b.addr, tc.version)
			c.sendBytes(tc.connect)
			fh, body := c.read(packet.TypeConnack)
			if tc.version == packet.Version5 {
				var ack packet.Connack
				if err := ack.Decode(packet.Version5, fh, body); err != nil {
					t.Fatal(err)
				}
				if ack.Reason != tc.want {
					t.Fatalf("CONNACK %v, want %v", ack.Reason, tc.want)
				}
			} else if len(body) != 2 || body[1] != tc.wantV3 {
				t.Fatalf("CONNACK body % x, want return code %d", body, tc.wantV3)
			}
			c.expectClosed()
		})
	}
	t.Run("good credentials", func(t *testing.T) {
		c := dialRaw(t, b.addr, packet.Version5)
		ack := c.connect(&packet.Connect{ClientID: []byte("ok"), Username: []byte("user"), Password: []byte("secret")})
		if ack.Reason != packet.CodeSuccess {
			t.Fatalf("CONNACK %v", ack.Reason)
		}
	})
}

func encode(t testing.TB, p appender, version byte) []byte {
	t.Helper()
	b, err := p.Append(nil, version)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// patch ORs or sets one byte: offset counted from the start of the packet.
func patch(b []byte, off int, v byte) []byte {
	b = append([]byte(nil), b...)
	if off == 9 {
		b[off] |= v
	} else {
		b[off] = v
	}
	return b
}

func TestAssignedClientIDv311(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	c := dialRaw(t, b.addr, packet.Version311)
	ack := c.connect(&packet.Connect{CleanStart: true}) // [MQTT-3.1.3-6]
	if ack.Reason != packet.CodeSuccess {
		t.Fatalf("CONNACK %v", ack.Reason)
	}
	eventually(t, "one assigned session", func() bool { return b.shard.Stats().Sessions == 1 })
}

func TestSessionTakeover(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	t.Run("v5 gets 0x8E", func(t *testing.T) {
		old := v5Client(t, b, "dup5")
		v5Client(t, b, "dup5")
		old.expectDisconnect(packet.ErrSessionTakenOver) // [MQTT-3.1.4-3]
	})
	t.Run("v3 is closed", func(t *testing.T) {
		old := dialRaw(t, b.addr, packet.Version311)
		old.connectOK("dup3")
		nw := dialRaw(t, b.addr, packet.Version311)
		nw.connectOK("dup3")
		old.expectClosed()
		nw.send(&packet.Ping{Type: packet.TypePingreq})
		nw.read(packet.TypePingresp)
	})
}

func TestKeepAlive(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	c := dialRaw(t, b.addr, packet.Version5)
	start := time.Now()
	c.connect(&packet.Connect{ClientID: []byte("ka"), CleanStart: true, KeepAlive: 1})
	c.expectDisconnect(packet.ErrKeepAliveTimeout) // [MQTT-3.1.2-22]
	if el := time.Since(start); el < 1400*time.Millisecond || el > 4*time.Second {
		t.Fatalf("closed after %v, want about 1.5 s", el)
	}

	// A client that pings stays connected past 1.5 x keep alive.
	c2 := dialRaw(t, b.addr, packet.Version311)
	c2.connect(&packet.Connect{ClientID: []byte("ka2"), CleanStart: true, KeepAlive: 1})
	for range 3 {
		time.Sleep(600 * time.Millisecond)
		c2.send(&packet.Ping{Type: packet.TypePingreq})
		c2.read(packet.TypePingresp)
	}
}

func TestConnectTimeout(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{ConnectTimeout: 200 * time.Millisecond}, ConnInfo{})
	c := dialRaw(t, b.addr, packet.Version5)
	c.expectClosed() // a client that sends nothing
}

func TestTokenDeadline(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{Deadline: time.Now().Add(300 * time.Millisecond)})
	c := v5Client(t, b, "expiring")
	c.expectDisconnect(packet.ErrMaximumConnectTime)
}

func TestShutdownDisconnects(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	c5 := v5Client(t, b, "s5")
	c3 := dialRaw(t, b.addr, packet.Version311)
	c3.connectOK("s3")
	if err := b.shard.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	c5.expectDisconnect(packet.ErrServerShuttingDown)
	c3.expectClosed()
	// New connections are refused once shut down.
	c := dialRaw(t, b.addr, packet.Version5)
	c.send(&packet.Connect{ClientID: []byte("late")})
	c.expectClosed()
}

// TestConnInfoRefuse: a connection its server refused before the shard
// (ConnInfo.Refuse) is answered with that reason: MQTT 5 CONNACK 0x87,
// 3.1.1 return code 5, then closed.
func TestConnInfoRefuse(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{AllowAnonymous: true, Refuse: packet.ErrNotAuthorized})
	for _, v := range []byte{packet.Version5, packet.Version311} {
		c := dialRaw(t, b.addr, v)
		ack := c.connect(&packet.Connect{ProtocolName: []byte("MQTT"), Version: v, CleanStart: true, ClientID: []byte("refused")})
		if ack.Reason != packet.ErrNotAuthorized {
			t.Fatalf("version %d: CONNACK %#x, want not authorized", v, byte(ack.Reason))
		}
		c.expectClosed()
	}
	if _, ok := b.shard.SessionStats("refused"); ok {
		t.Fatal("a refused connection made a session")
	}
}
