package replica

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// dialAs opens a raw connection to node to, claiming to be node from, and
// runs the handshake with secret; it returns the session key.
func dialAs(t *testing.T, addr string, secret []byte, from, to uint64) (net.Conn, []byte, error) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	key, err := clientHandshake(conn, secret, from, to)
	return conn, key, err
}

// frame encodes the n-th frame (from 0) of a connection with key.
func frame(key []byte, n int, kind byte, group uint64, payload []byte) []byte {
	var buf bytes.Buffer
	fw := newFrameWriter(&buf, key)
	for range n {
		fw.write(kindAlive, 0, nil)
	}
	fw.flush()
	buf.Reset()
	fw.write(kind, group, payload)
	fw.flush()
	return buf.Bytes()
}

// closedByPeer reports whether the other end closed conn.
func closedByPeer(conn net.Conn) bool {
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := conn.Read(make([]byte, 1))
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err)
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout()
}

// heartbeatFrame is a leader's heartbeat with a term far ahead: accepted,
// it moves the node to that term and that leader (raft takes a heartbeat of
// a higher term whatever the lease).
func heartbeatFrame(t *testing.T, from, to, term uint64) []byte {
	t.Helper()
	b, err := proto.Marshal(&pb.Message{Type: pb.MsgHeartbeat.Enum(), From: new(from), To: new(to), Term: new(term)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPeerAuthentication: only a node holding the cluster secret, under its
// own id, gets a message into a group; everything else is refused and
// counted, and the group's term does not move.
func TestPeerAuthentication(t *testing.T) {
	c := newCluster(t, 3, nil)
	lead := c.leader(10 * time.Second)
	target := uint64(1)
	if target == lead {
		target = 2
	}
	h := c.host(target)
	term := c.group(target).Term()
	addr := c.addrs[target]
	forged := heartbeatFrame(t, 3, target, term+100)

	t.Run("wrong secret", func(t *testing.T) {
		before := h.Stats().AuthFailures
		conn, _, err := dialAs(t, addr, []byte("not-the-cluster-secret-at-all!!"), 3, target)
		if !errors.Is(err, ErrAuth) {
			t.Fatalf("handshake with a wrong secret: %v, want ErrAuth (the node's proof does not verify)", err)
		}
		// Send a proof anyway, as a client that ignores the server's: refused.
		conn.Write(make([]byte, macSize))
		if !closedByPeer(conn) {
			t.Error("the node kept a connection whose proof was wrong")
		}
		waitFor(t, 5*time.Second, "the refusal to be counted", func() bool { return h.Stats().AuthFailures > before })
	})

	t.Run("unknown node", func(t *testing.T) {
		before := h.Stats().AuthFailures
		conn, _, err := dialAs(t, addr, c.secret, 99, target)
		if err == nil {
			t.Fatal("handshake as an unknown node succeeded")
		}
		if !closedByPeer(conn) {
			t.Error("the node kept a connection from an unknown node")
		}
		waitFor(t, 5*time.Second, "the refusal to be counted", func() bool { return h.Stats().AuthFailures > before })
	})

	t.Run("tampered frame", func(t *testing.T) {
		before := h.Stats().MACFailures
		conn, key, err := dialAs(t, addr, c.secret, 3, target)
		if err != nil {
			t.Fatal(err)
		}
		// One bit of the payload flipped after the MAC was computed.
		raw := frame(key, 0, kindRaft, testGroup, forged)
		raw[frameHeaderSize+frameBodyHeader+3] ^= 0x40
		if _, err := conn.Write(raw); err != nil {
			t.Fatal(err)
		}
		if !closedByPeer(conn) {
			t.Error("the node kept a connection after a frame with a bad MAC")
		}
		waitFor(t, 5*time.Second, "the refusal to be counted", func() bool { return h.Stats().MACFailures > before })
	})

	t.Run("impersonation", func(t *testing.T) {
		// Node 3's own connection carrying a message that says it is from 2.
		before := h.Stats().BadMessages
		conn, key, err := dialAs(t, addr, c.secret, 3, target)
		if err != nil {
			t.Fatal(err)
		}
		conn.Write(frame(key, 0, kindRaft, testGroup, heartbeatFrame(t, 2, target, term+100)))
		waitFor(t, 5*time.Second, "the refusal to be counted", func() bool { return h.Stats().BadMessages > before })
	})

	t.Run("replayed frame", func(t *testing.T) {
		// A frame captured from one connection, sent on another: the session
		// key differs, so its MAC does not verify.
		_, key1, err := dialAs(t, addr, c.secret, 3, target)
		if err != nil {
			t.Fatal(err)
		}
		captured := frame(key1, 0, kindRaft, testGroup, forged)
		before := h.Stats().MACFailures
		conn2, _, err := dialAs(t, addr, c.secret, 3, target)
		if err != nil {
			t.Fatal(err)
		}
		conn2.Write(captured)
		if !closedByPeer(conn2) {
			t.Error("the node accepted a frame replayed from another connection")
		}
		waitFor(t, 5*time.Second, "the refusal to be counted", func() bool { return h.Stats().MACFailures > before })
	})

	if got := c.group(target).Term(); got != term {
		t.Errorf("node %d's term moved from %d to %d: a refused message reached raft", target, term, got)
	}
	if c.group(target).Leader() != lead {
		t.Errorf("node %d lost its leader", target)
	}

	t.Run("authenticated peer is heard", func(t *testing.T) {
		// The control: the same heartbeat, sent by node 3 as itself on its
		// own authenticated connection, does reach raft and moves the term.
		conn, key, err := dialAs(t, addr, c.secret, 3, target)
		if err != nil {
			t.Fatal(err)
		}
		conn.Write(frame(key, 0, kindRaft, testGroup, forged))
		waitFor(t, 5*time.Second, "the genuine heartbeat to move the term", func() bool {
			return c.group(target).Term() >= term+100
		})
	})
}
