package gateway

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"berth.dev/broker/packet"
	"berth.dev/broker/proxyproto"
)

// testNode is a tiny stand-in for a broker node's internal listener (the
// real node is written by another team in broker/): it verifies the PROXY
// v2 header with berth.dev/broker/proxyproto exactly as the node must,
// answers the CONNECT with a CONNACK from berth.dev/broker/packet, and then
// behaves as a loopback broker for one client: PINGREQ -> PINGRESP,
// SUBSCRIBE -> SUBACK, PUBLISH -> PUBACK (QoS 1) and the message echoed
// back to the same client.
type testNode struct {
	ln       net.Listener
	verifier *proxyproto.Verifier
	conns    chan nodeConn // one per accepted connection, after the header
	wg       sync.WaitGroup

	mu   sync.Mutex
	open map[net.Conn]struct{}
}

// nodeConn is what the node learned about one relayed connection.
type nodeConn struct {
	err      error // header verification failure (the connection was closed)
	header   proxyproto.Header
	info     proxyproto.Info
	clientID string
	version  byte
}

func newTestNode(t testing.TB, secret []byte) *testNode {
	t.Helper()
	v, err := proxyproto.NewVerifier(secret, proxyproto.VerifierOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &testNode{ln: ln, verifier: v, conns: make(chan nodeConn, 64), open: map[net.Conn]struct{}{}}
	n.wg.Go(n.accept)
	t.Cleanup(func() {
		ln.Close()
		n.mu.Lock()
		for c := range n.open {
			c.Close()
		}
		n.mu.Unlock()
		n.wg.Wait()
	})
	return n
}

func (n *testNode) addr() string { return n.ln.Addr().String() }

func (n *testNode) accept() {
	for {
		c, err := n.ln.Accept()
		if err != nil {
			return
		}
		n.mu.Lock()
		n.open[c] = struct{}{}
		n.mu.Unlock()
		n.wg.Go(func() {
			defer func() {
				c.Close()
				n.mu.Lock()
				delete(n.open, c)
				n.mu.Unlock()
			}()
			n.serve(c)
		})
	}
}

// next returns the next connection the node accepted.
func (n *testNode) next(t *testing.T) nodeConn {
	t.Helper()
	select {
	case c := <-n.conns:
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("the node saw no connection within 5 s")
		return nodeConn{}
	}
}

func (n *testNode) serve(c net.Conn) {
	var nc nodeConn
	raw, err := proxyproto.ReadHeader(c, 2*time.Second, 4096, nil)
	if err == nil {
		err = n.verifier.Verify(raw, &nc.header, &nc.info)
	}
	if err != nil {
		nc.err = err
		n.conns <- nc
		return // before reading any MQTT byte
	}
	n.serveMQTT(c, nc)
}

// serveMQTT serves one client whose header was verified (nc): CONNECT,
// then the loopback broker.
func (n *testNode) serveMQTT(c net.Conn, nc nodeConn) {
	r := packet.NewReader(c, 4096)
	fh, body, err := r.ReadPacket(1 << 20)
	var connect packet.Connect
	if err == nil {
		err = connect.Decode(0, fh, body)
	}
	if err != nil {
		nc.err = err
		n.conns <- nc
		return
	}
	nc.clientID, nc.version = string(connect.ClientID), connect.Version
	n.conns <- nc
	v := connect.Version
	out, _ := (&packet.Connack{}).Append(nil, v)
	if _, err := c.Write(out); err != nil {
		return
	}
	var (
		pub packet.Publish
		sub packet.Subscribe
	)
	for {
		fh, body, err := r.ReadPacket(0)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			return
		}
		out = out[:0]
		switch fh.Type {
		case packet.TypePingreq:
			out, _ = (&packet.Ping{Type: packet.TypePingresp}).Append(out, v)
		case packet.TypeSubscribe:
			if sub.Decode(v, fh, body) != nil {
				return
			}
			ack := packet.Suback{PacketID: sub.PacketID}
			for _, s := range sub.Subscriptions {
				ack.Reasons = append(ack.Reasons, packet.ReasonCode(min(s.QoS, 1)))
			}
			out, _ = ack.Append(out, v)
		case packet.TypePublish:
			if pub.Decode(v, fh, body) != nil {
				return
			}
			if pub.QoS == 1 {
				out, _ = (&packet.Ack{Type: packet.TypePuback, PacketID: pub.PacketID}).Append(out, v)
			}
			echo := packet.Publish{Topic: pub.Topic, Payload: pub.Payload}
			out, _ = echo.Append(out, v)
		case packet.TypeDisconnect:
			return
		default:
			continue
		}
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}
