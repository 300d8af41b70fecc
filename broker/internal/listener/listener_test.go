package listener_test

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"berth.dev/broker/internal/listener"
	"berth.dev/broker/internal/shard"
	"berth.dev/broker/packet"
	"github.com/coder/websocket"
)

// start runs a shard behind a Server with a TCP and a WebSocket listener.
func start(t *testing.T) (tcpAddr, wsURL string) {
	t.Helper()
	sh := shard.New(shard.Options{SysInterval: -1})
	srv := listener.New(nil, func(c net.Conn, remote string) {
		sh.ServeConn(c, shard.ConnInfo{RemoteAddr: remote, AllowAnonymous: true})
	})
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.ServeTCP(tl); err != nil {
		t.Fatal(err)
	}
	if err := srv.ServeWebSocket(wl); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
		if err := sh.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		if err := srv.Wait(ctx); err != nil {
			t.Error(err)
		}
	})
	return tl.Addr().String(), "ws://" + wl.Addr().String() + "/mqtt"
}

func dialWS(t *testing.T, url string) net.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{Subprotocols: []string{"mqtt"}})
	if err != nil {
		t.Fatal(err)
	}
	if ws.Subprotocol() != "mqtt" || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("subprotocol %q status %d", ws.Subprotocol(), resp.StatusCode)
	}
	nc := websocket.NetConn(context.Background(), ws, websocket.MessageBinary)
	t.Cleanup(func() { _ = nc.Close() })
	return nc
}

func write(t *testing.T, nc net.Conn, p interface {
	Append([]byte, byte) ([]byte, error)
}) {
	t.Helper()
	b, err := p.Append(nil, packet.Version5)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Write(b); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, rd *packet.Reader, nc net.Conn, want packet.Type) []byte {
	t.Helper()
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	fh, body, err := rd.ReadPacket(0)
	if err != nil || fh.Type != want {
		t.Fatalf("read %v: %v %v", want, fh.Type, err)
	}
	return body
}

// TestWebSocketAndTCP publishes over TCP and receives over WebSocket.
func TestWebSocketAndTCP(t *testing.T) {
	tcpAddr, wsURL := start(t)
	ws := dialWS(t, wsURL)
	wr := packet.NewReader(ws, 512)
	write(t, ws, &packet.Connect{ClientID: []byte("ws"), CleanStart: true})
	read(t, wr, ws, packet.TypeConnack)
	write(t, ws, &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: []byte("x/#"), QoS: 1}}})
	read(t, wr, ws, packet.TypeSuback)

	tc, err := net.Dial("tcp", tcpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	tr := packet.NewReader(tc, 512)
	write(t, tc, &packet.Connect{ClientID: []byte("tcp"), CleanStart: true})
	read(t, tr, tc, packet.TypeConnack)
	write(t, tc, &packet.Publish{QoS: 1, PacketID: 3, Topic: []byte("x/y"), Payload: []byte("over ws")})
	read(t, tr, tc, packet.TypePuback)

	body := read(t, wr, ws, packet.TypePublish)
	var p packet.Publish
	if err := p.Decode(packet.Version5, packet.FixedHeader{Type: packet.TypePublish, Flags: 2, Remaining: len(body)}, body); err != nil {
		t.Fatal(err)
	}
	if string(p.Payload) != "over ws" {
		t.Fatalf("payload %q", p.Payload)
	}
}

// TestWebSocketRequiresSubprotocol refuses a client without "mqtt".
func TestWebSocketRequiresSubprotocol(t *testing.T) {
	_, wsURL := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, wsURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = ws.Read(ctx)
	if websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		t.Fatalf("want policy violation close, got %v", err)
	}
}

// TestCloseStopsAccepting checks that a closed Server accepts nothing.
func TestCloseStopsAccepting(t *testing.T) {
	srv := listener.New(nil, func(c net.Conn, _ string) { _ = c.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.ServeTCP(ln); err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		t.Fatal("dial succeeded after Close")
	}
	if err := srv.ServeTCP(ln); err != listener.ErrClosed {
		t.Fatalf("ServeTCP after Close: %v", err)
	}
	if err := srv.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
}
