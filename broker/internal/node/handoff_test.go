package node

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"berth.dev/broker/handoff"
)

// A device's socket handed off by the gateway is served as a relayed one:
// its CONNECT (left unread in the socket) is answered, it subscribes and
// publishes, a relayed client's publish reaches it and its own reaches
// the relayed client; closed follows its DISCONNECT, and the gateway's
// close ends one with DISCONNECT 0x87.
func TestHandoffRoundTrip(t *testing.T) {
	t.Parallel()
	n, path := startHandoffNode(t, nil)
	gw, nodeID, live := handoffDial(t, path)
	if nodeID != "node-test" || len(live) != 0 {
		t.Fatalf("hello: node %q, live %v; want node-test and none", nodeID, live)
	}
	a := cred{tenant: "ten_a", id: "crd_h1", acl: allowAll}
	dev := n.handOffClient(t, gw, 1, a, "handed")
	if code := subscribe(t, dev.Client, "down/#"); code != 1 {
		t.Fatalf("subscribe over the handed-off socket: %#x", code)
	}
	relayedGot := make(chan string, 16)
	relayed := n.mqtt5(t, a, "relayed", relayedGot)
	subscribe(t, relayed, "up/#")

	if code := publish(t, relayed, "down/1", "to the device"); code != 0 {
		t.Fatalf("relayed publish: %#x", code)
	}
	expectMsg(t, dev.got, "down/1=to the device")
	if code := publish(t, dev.Client, "up/1", "from the device"); code != 0 {
		t.Fatalf("publish over the handed-off socket: %#x", code)
	}
	expectMsg(t, relayedGot, "up/1=from the device")

	if err := dev.Disconnect(&paho.Disconnect{}); err != nil {
		t.Fatal(err)
	}
	expectAnswer(t, gw, handoff.TypeClosed, 1)

	// The gateway's revocation backstop.
	dev2 := n.handOffClient(t, gw, 2, a, "handed-2")
	if err := gw.Write(handoff.AppendID(nil, handoff.TypeClose, 2)); err != nil {
		t.Fatal(err)
	}
	dev2.expectDisconnect(t, 0x87, "the gateway's close")
	expectAnswer(t, gw, handoff.TypeClosed, 2)
}

// Handoffs the node will not serve are refused, and the device's socket
// is left to the gateway untouched: a header signed with another secret,
// a replayed header, two descriptors or none. The gateway's connection
// survives them all.
func TestHandoffRefused(t *testing.T) {
	t.Parallel()
	n, path := startHandoffNode(t, nil)
	gw, _, _ := handoffDial(t, path)
	a := cred{tenant: "ten_a", id: "crd_h2", acl: allowAll}
	connect := connectBytes(t, "dev") // sent before the gateway hands the socket off
	pending := func() (net.Conn, *net.TCPConn) {
		dev, srv := devicePair(t)
		if _, err := dev.Write(connect); err != nil {
			t.Fatal(err)
		}
		waitBytes(t, srv)
		return dev, srv
	}

	t.Log("forged: signed with another secret")
	dev, srv := pending()
	if err := gw.Handoff(10, n.gatewayHeader(t, srv, a, []byte("another-secret-0123456789abcdef")), srv); err != nil {
		t.Fatal(err)
	}
	if r := expectAnswer(t, gw, handoff.TypeRefused, 10); r != handoff.RefusedBadHeader {
		t.Fatalf("forged header refused %v, want bad-header", r)
	}
	expectUntouched(t, dev, srv, connect)

	t.Log("replayed: a header the node took once already")
	_, srv1 := pending()
	hdr := n.gatewayHeader(t, srv1, a, nil)
	if err := gw.Handoff(11, hdr, srv1); err != nil {
		t.Fatal(err)
	}
	expectAnswer(t, gw, handoff.TypeTaken, 11)
	srv1.Close()
	dev, srv = pending()
	if err := gw.Handoff(12, hdr, srv); err != nil {
		t.Fatal(err)
	}
	if r := expectAnswer(t, gw, handoff.TypeRefused, 12); r != handoff.RefusedBadHeader {
		t.Fatalf("replayed header refused %v, want bad-header", r)
	}
	expectUntouched(t, dev, srv, connect)

	t.Log("two descriptors")
	dev, srv = pending()
	frame, err := handoff.AppendHandoff(nil, 13, n.gatewayHeader(t, srv, a, nil))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := srv.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var werr error
	if err := rc.Control(func(fd uintptr) { werr = gw.WriteFDs(frame, int(fd), int(fd)) }); err != nil || werr != nil {
		t.Fatal(err, werr)
	}
	if r := expectAnswer(t, gw, handoff.TypeRefused, 13); r != handoff.RefusedBadDescriptor {
		t.Fatalf("two descriptors refused %v, want bad-descriptor", r)
	}
	expectUntouched(t, dev, srv, connect) // both of the node's copies closed

	t.Log("no descriptor")
	frame, err = handoff.AppendHandoff(nil, 14, n.gatewayHeader(t, srv, a, nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.Write(frame); err != nil {
		t.Fatal(err)
	}
	if r := expectAnswer(t, gw, handoff.TypeRefused, 14); r != handoff.RefusedBadDescriptor {
		t.Fatalf("no descriptor refused %v, want bad-descriptor", r)
	}

	t.Log("and a good one still works")
	dev2 := n.handOffClient(t, gw, 15, a, "after-refusals")
	if code := subscribe(t, dev2.Client, "x/#"); code != 1 {
		t.Fatalf("subscribe: %#x", code)
	}
}

// A tenant this node does not lead (replicated, its other voter unknown)
// is refused not-leader: the node writes not a byte to the device and
// reads none of its CONNECT, so the gateway can relay it elsewhere.
func TestHandoffNotLeader(t *testing.T) {
	t.Parallel()
	ports := freePorts(t, 2)
	n, path := startHandoffNode(t, func(c *Config) {
		c.DataDir = t.TempDir()
		c.Peers = []Peer{{ID: "node-ghost", Addr: ports[1]}}
		c.PeerListen, c.PeerSecret = ports[0], testSecret
		c.RaftTick = 20 * time.Millisecond
	})
	setPlan(t, n.pool, "ten_a", "pro") // two voters: this node and one that never came up
	gw, _, _ := handoffDial(t, path)
	dev, srv := devicePair(t)
	connect := connectBytes(t, "dev")
	if _, err := dev.Write(connect); err != nil {
		t.Fatal(err)
	}
	waitBytes(t, srv)
	if err := gw.Handoff(20, n.gatewayHeader(t, srv, cred{tenant: "ten_a", id: "crd_h3", acl: allowAll}, nil), srv); err != nil {
		t.Fatal(err)
	}
	if r := expectAnswer(t, gw, handoff.TypeRefused, 20); r != handoff.RefusedNotLeader {
		t.Fatalf("refused %v, want not-leader", r)
	}
	expectUntouched(t, dev, srv, connect)
}

// When the gateway's connection ends the node serves on the devices it
// took, and the hello of the next connection lists them, followed by a
// credentials frame naming each one's credential (so the adopting
// gateway keeps its revocation backstop); their closed goes to it.
func TestHandoffGatewayReconnect(t *testing.T) {
	t.Parallel()
	n, path := startHandoffNode(t, nil)
	gw1, _, _ := handoffDial(t, path)
	a := cred{tenant: "ten_a", id: "crd_h4", acl: allowAll}
	dev := n.handOffClient(t, gw1, 7, a, "kept")
	subscribe(t, dev.Client, "down/#")
	gw1.Close()

	relayed := n.mqtt5(t, a, "relayed", nil)
	publish(t, relayed, "down/1", "after the gateway left")
	expectMsg(t, dev.got, "down/1=after the gateway left")

	// The node notices the old connection's end on its own time: a new
	// gateway connection lists the device once it has.
	var gw2 *handoff.Conn
	for deadline := time.Now().Add(5 * time.Second); ; {
		var live []handoff.Live
		gw2, _, live = handoffDial(t, path)
		if len(live) == 1 && live[0] == (handoff.Live{ID: 7, Tenant: "ten_a"}) {
			break
		}
		if len(live) != 0 || time.Now().After(deadline) {
			t.Fatalf("hello after the reconnect lists %v, want [{7 ten_a}]", live)
		}
		gw2.Close()
		time.Sleep(10 * time.Millisecond)
	}
	if err := dev.Disconnect(&paho.Disconnect{}); err != nil {
		t.Fatal(err)
	}
	f := readFrame(t, gw2)
	creds, err := handoff.ParseCredentials(f.Body, nil)
	if f.Type != handoff.TypeCredentials || err != nil || len(creds) != 1 || creds[0] != (handoff.Live{ID: 7, Credential: "crd_h4"}) {
		t.Fatalf("after the hello: type %#x, %v (%v); want credentials [{7 crd_h4}]", f.Type, creds, err)
	}
	expectAnswer(t, gw2, handoff.TypeClosed, 7)
}

// The node's shutdown disconnects a handed-off device as its others
// (DISCONNECT 0x8B), tells the gateway closed, then closes the gateway's
// connection and removes its socket file.
func TestHandoffShutdown(t *testing.T) {
	t.Parallel()
	n, path := startHandoffNode(t, nil)
	gw, _, _ := handoffDial(t, path)
	dev := n.handOffClient(t, gw, 3, cred{tenant: "ten_a", id: "crd_h5", acl: allowAll}, "stopping")
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut <- n.Shutdown(ctx)
	}()
	dev.expectDisconnect(t, 0x8b, "the node's shutdown")
	expectAnswer(t, gw, handoff.TypeClosed, 3)
	if err := <-shut; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	_ = gw.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := gw.ReadFrame(time.Second); !errors.Is(err, io.EOF) {
		t.Fatalf("gateway connection after shutdown: %v, want end of stream", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("socket file after shutdown: %v", err)
	}
}
