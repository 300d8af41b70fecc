package shard

import (
	"fmt"
	"net"
	"testing"
	"time"

	"berth.dev/broker/packet"
)

// serveCapturing runs sh behind a listener that hands every accepted
// net.Conn (the one ServeConn gets) to conns.
func serveCapturing(t *testing.T, sh *Shard, info ConnInfo) (addr string, conns <-chan net.Conn) {
	t.Helper()
	ch := make(chan net.Conn, 8)
	return serveHooked(t, sh, info, func(c net.Conn) { ch <- c }), ch
}

// End tells an MQTT 5 client why before closing; a 3.1.1 client is just
// closed [MQTT-4.8.0-1]; a net.Conn the shard does not serve is not found.
func TestEndSaysWhy(t *testing.T) {
	sh := New(Options{SysInterval: -1})
	addr, conns := serveCapturing(t, sh, ConnInfo{AllowAnonymous: true})
	for _, tc := range []struct {
		name    string
		version byte
	}{{"mqtt5", packet.Version5}, {"mqtt311", packet.Version311}} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, addr, tc.version)
			c.connectOK("ended-" + tc.name)
			nc := <-conns
			if !sh.End(nc, packet.ErrNotAuthorized) {
				t.Fatal("End did not find the connection")
			}
			if tc.version == packet.Version5 {
				c.expectDisconnect(packet.ErrNotAuthorized)
			} else {
				c.expectClosed()
			}
		})
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if sh.End(a, packet.ErrNotAuthorized) {
		t.Fatal("End found a connection the shard never served")
	}
}

// Re-authentication on the shard's side: the callback's deadline replaces
// the connection's (it outlives the first one); its error ends the
// connection with 0x87.
func TestReauthenticateMovesTheDeadline(t *testing.T) {
	first := time.Now().Add(300 * time.Millisecond)
	b := startBroker(t, Options{}, ConnInfo{
		Deadline:   first,
		AuthMethod: "berth-jwt",
		Reauthenticate: func(data []byte) (time.Time, error) {
			if string(data) != "fresh" {
				return time.Time{}, fmt.Errorf("bad token %q", data)
			}
			return time.Now().Add(time.Hour), nil
		},
	})
	reauth := func(c *rawClient, data string) {
		a := packet.Auth{Reason: packet.CodeReAuthenticate}
		a.Props.AuthMethod, a.Props.AuthData = []byte("berth-jwt"), []byte(data)
		c.send(&a)
	}
	good := v5Client(t, b, "good")
	reauth(good, "fresh")
	fh, body := good.read(packet.TypeAuth)
	var ans packet.Auth
	if err := ans.Decode(packet.Version5, fh, body); err != nil || ans.Reason != packet.CodeSuccess || string(ans.Props.AuthMethod) != "berth-jwt" {
		t.Fatalf("AUTH answer %+v (%v), want 0x00 naming berth-jwt", ans, err)
	}
	bad := v5Client(t, b, "bad")
	reauth(bad, "stale")
	bad.expectDisconnect(packet.ErrNotAuthorized)

	time.Sleep(time.Until(first.Add(200 * time.Millisecond))) // the first deadline passes
	good.send(&packet.Ping{Type: packet.TypePingreq})
	good.read(packet.TypePingresp)
}

// SetLimits widens (or narrows) live windows and queue bounds without a
// reconnect.
func TestSetLimitsAppliesToLiveSessions(t *testing.T) {
	b := startBroker(t, Options{MaxInflight: 2}, ConnInfo{})
	sub := v5Client(t, b, "sub")
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("w/#"), QoS: 1})
	pub := v5Client(t, b, "pub")
	for i := range 5 {
		pub.send(&packet.Publish{QoS: 1, PacketID: uint16(i + 1), Topic: []byte("w/x"), Payload: []byte{byte(i)}})
		pub.ack(packet.TypePuback)
	}
	sub.publish()
	sub.publish()
	sub.expectSilence(200 * time.Millisecond) // window of 2, nothing acknowledged
	b.shard.SetLimits(4, 0)
	sub.publish()
	sub.publish()
	sub.expectSilence(200 * time.Millisecond) // now 4 inflight
	before := b.shard.Stats().Dropped["queue_full"]
	b.shard.SetLimits(0, 1) // one byte: the one queued message stays, new ones are dropped
	pub.send(&packet.Publish{QoS: 1, PacketID: 9, Topic: []byte("w/x"), Payload: []byte("over")})
	pub.ack(packet.TypePuback)
	if got := b.shard.Stats().Dropped["queue_full"]; got != before+1 {
		t.Fatalf("queue_full drops %d, want %d after lowering MaxQueuedBytes", got, before+1)
	}
}
