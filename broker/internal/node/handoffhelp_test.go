package node

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"berth.dev/broker/handoff"
	"berth.dev/broker/proxyproto"
	"berth.dev/testenv"
)

// startHandoffNode starts a node with a handoff socket; change may alter
// its Config further.
func startHandoffNode(t *testing.T, change func(*Config)) (*testNode, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "node.sock")
	n := startNodeCfg(t, testenv.DatabaseURL(t), "", true, func(c *Config) {
		c.HandoffListen = path
		if change != nil {
			change(c)
		}
	})
	return n, path
}

// handoffDial connects to the node's socket as a gateway and reads its
// hello.
func handoffDial(t *testing.T, path string) (*handoff.Conn, string, []handoff.Live) {
	t.Helper()
	gw, err := handoff.Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Close() })
	var live []handoff.Live
	var id string
	for more := true; more; {
		f := readFrame(t, gw)
		if f.Type != handoff.TypeHello {
			t.Fatalf("first frame of type %#x, want hello", f.Type)
		}
		if id, more, live, err = handoff.ParseHello(f.Body, live); err != nil {
			t.Fatal(err)
		}
	}
	return gw, id, live
}

// readFrame reads the node's next frame, waiting 5 s at most.
func readFrame(t *testing.T, gw *handoff.Conn) handoff.Frame {
	t.Helper()
	_ = gw.SetReadDeadline(time.Now().Add(5 * time.Second))
	f, err := gw.ReadFrame(5 * time.Second)
	if err != nil {
		t.Fatalf("reading from the node: %v", err)
	}
	return f
}

// expectAnswer reads the node's answer for handoff id: taken (reason 0)
// or the refusal's reason; or closed when want is TypeClosed.
func expectAnswer(t *testing.T, gw *handoff.Conn, wantType byte, id uint64) handoff.Reason {
	t.Helper()
	f := readFrame(t, gw)
	var got uint64
	var r handoff.Reason
	var err error
	if f.Type == handoff.TypeRefused {
		got, r, err = handoff.ParseRefused(f.Body)
	} else {
		got, err = handoff.ParseID(f.Body)
	}
	if err != nil || f.Type != wantType || got != id {
		t.Fatalf("answer: type %#x id %d reason %v (%v); want type %#x id %d", f.Type, got, r, err, wantType, id)
	}
	return r
}

// devicePair is a device's TCP connection: the device's end and the end
// a gateway accepted (whose descriptor it hands off).
func devicePair(t *testing.T) (dev net.Conn, srv *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dev, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return dev, s.(*net.TCPConn)
}

// gatewayHeader is the signed PROXY header the gateway writes for the
// device on srv (conn.go in the gateway: the device's address as source,
// the accepting address as destination), with the credential's row in
// place as n.dial makes it. secret nil signs with the test secret.
func (n *testNode) gatewayHeader(t *testing.T, srv net.Conn, c cred, secret []byte) []byte {
	t.Helper()
	if secret == nil {
		secret = testSecret
	}
	n.ensureCredential(t, c)
	s, err := proxyproto.NewSigner(secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	src := srv.RemoteAddr().(*net.TCPAddr).AddrPort()
	dst := srv.LocalAddr().(*net.TCPAddr).AddrPort()
	info := proxyproto.Info{TenantID: c.tenant, CredentialID: c.id, ACL: []byte(c.acl), TokenExpiry: c.expiry}
	hdr, err := s.Append(make([]byte, 0, 256+len(c.acl)), src, dst, &info)
	if err != nil {
		t.Fatal(err)
	}
	return hdr
}

// waitBytes waits until the device's bytes are in srv's receive queue,
// consuming none (MSG_PEEK), as the gateway waits for the CONNECT.
func waitBytes(t *testing.T, srv *net.TCPConn) {
	t.Helper()
	rc, err := srv.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	_ = srv.SetReadDeadline(time.Now().Add(5 * time.Second))
	defer srv.SetReadDeadline(time.Time{})
	var perr error
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, perr = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return !errors.Is(perr, syscall.EAGAIN)
	})
	if err != nil || perr != nil {
		t.Fatalf("waiting for the device's bytes: %v %v", err, perr)
	}
}

// handedClient is a paho client on the device's end of a socket handed
// off as id. Its CONNECT is written first and stays unread in the
// socket until the node reads it, as after a gateway's MSG_PEEK.
type handedClient struct {
	*paho.Client
	got  chan string
	disc chan byte
}

// expectDisconnect waits for the server's DISCONNECT with code after
// what.
func (hc *handedClient) expectDisconnect(t *testing.T, code byte, what string) {
	t.Helper()
	select {
	case got := <-hc.disc:
		if got != code {
			t.Fatalf("after %s: DISCONNECT %#x, want %#x", what, got, code)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no DISCONNECT after %s", what)
	}
}

func (n *testNode) handOffClient(t *testing.T, gw *handoff.Conn, id uint64, c cred, clientID string) *handedClient {
	t.Helper()
	dev, srv := devicePair(t)
	hc := &handedClient{got: make(chan string, 16), disc: make(chan byte, 1)}
	hc.Client = paho.NewClient(paho.ClientConfig{
		Conn: dev,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(p paho.PublishReceived) (bool, error) {
			hc.got <- p.Packet.Topic + "=" + string(p.Packet.Payload)
			return true, nil
		}},
		OnServerDisconnect: func(d *paho.Disconnect) {
			select {
			case hc.disc <- d.ReasonCode:
			default:
			}
		},
	})
	type result struct {
		ack *paho.Connack
		err error
	}
	connected := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ack, err := hc.Connect(ctx, &paho.Connect{ClientID: clientID, KeepAlive: 30, CleanStart: true, Username: c.id, UsernameFlag: true})
		connected <- result{ack, err}
	}()
	waitBytes(t, srv)
	if err := gw.Handoff(id, n.gatewayHeader(t, srv, c, nil), srv); err != nil {
		t.Fatal(err)
	}
	expectAnswer(t, gw, handoff.TypeTaken, id)
	srv.Close() // taken: the gateway lets go of its copy
	r := <-connected
	if r.err != nil || r.ack.ReasonCode != 0 {
		t.Fatalf("connect over the handed-off socket: %v %+v", r.err, r.ack)
	}
	return hc
}

// expectUntouched checks, for a refused handoff, that the node wrote
// nothing to the device and read nothing of it: the gateway still finds
// the device's bytes whole, and once the gateway has read them and
// closed its copy the device reads end of stream, not a byte (the node
// closed its copy too, or the device would wait on).
func expectUntouched(t *testing.T, dev net.Conn, srv *net.TCPConn, sent []byte) {
	t.Helper()
	_ = srv.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, len(sent))
	if _, err := io.ReadFull(srv, got); err != nil || string(got) != string(sent) {
		t.Fatalf("the device's bytes after the refusal: % x (%v), want % x", got, err, sent)
	}
	srv.Close()
	_ = dev.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [64]byte
	n, err := dev.Read(b[:])
	if n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("the device read %d bytes (% x), %v; want end of stream and nothing", n, b[:n], err)
	}
}
