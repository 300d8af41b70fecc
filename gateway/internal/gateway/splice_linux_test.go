package gateway

import (
	"bytes"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// openPipes counts this process's open pipe descriptors.
func openPipes(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "pipe:") {
			n++
		}
	}
	return n
}

// TestIdleRelaysHoldNoPipes: a spliced relay holds a pipe only while bytes
// are in flight. Twenty connections that have relayed a packet each way
// and gone quiet share the pool's few pipes; TCPConn.ReadFrom held two
// pipes (four descriptors) per connection for as long as it lasted.
func TestIdleRelaysHoldNoPipes(t *testing.T) {
	const relays = 20
	bufs := newBufPool() // one pool for the gateway's relays, as Gateway.bufs
	before := openPipes(t)
	msg := []byte("a PUBLISH and its PUBACK")
	buf := make([]byte, len(msg))
	for range relays {
		client, server := sharedRelayPair(t, bufs)
		for _, d := range [][2]io.ReadWriter{{client, server}, {server, client}} {
			if _, err := d[0].Write(msg); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(d[1], buf); err != nil || !bytes.Equal(buf, msg) {
				t.Fatalf("relayed %q, %v", buf, err)
			}
		}
	}
	// A direction gives its pipe back right after the read that finds its
	// socket empty, which may come just after the peer got the bytes.
	var held int
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); runtime.Gosched() {
		if held = (openPipes(t) - before) / 2; held <= 2 {
			break
		}
	}
	t.Logf("%d idle relays hold %d pipes", relays, held)
	if held > 2 {
		t.Fatalf("%d idle relays hold %d pipes, want at most 2 (one per direction in the pool)", relays, held)
	}
}

// Splicing a chunk allocates nothing, and neither does taking and giving
// back the pool's pipe around it (TestRelayChunkAllocs covers the whole
// relay).
func TestSplicerPipePool(t *testing.T) {
	bufs := newBufPool()
	p, err := bufs.getPipe()
	if err != nil {
		t.Fatal(err)
	}
	bufs.putPipe(p)
	if allocs := testing.AllocsPerRun(100, func() {
		q, err := bufs.getPipe()
		if err != nil {
			t.Fatal(err)
		}
		bufs.putPipe(q)
	}); allocs != 0 {
		t.Fatalf("%v allocations per pooled pipe", allocs)
	}
	// A pipe that still holds bytes is closed, never handed to another
	// connection.
	q, err := bufs.getPipe()
	if err != nil {
		t.Fatal(err)
	}
	if q != p {
		t.Fatal("the pool did not hand back its pipe")
	}
	if _, err := syscall.Write(q.w, []byte("left")); err != nil {
		t.Fatal(err)
	}
	q.n = 4
	bufs.putPipe(q)
	if r, err := bufs.getPipe(); err != nil || r == q {
		t.Fatalf("a pipe with bytes in it came back from the pool (%v)", err)
	}
}

// sharedRelayPair is relayPair's spliced case with the pool given.
func sharedRelayPair(t *testing.T, bufs *bufPool) (client, server net.Conn) {
	t.Helper()
	pair := func() (net.Conn, net.Conn) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		a, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		b, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return a, b
	}
	client, gwClient := pair()
	gwNode, server := pair()
	done := make(chan struct{})
	go func() { relay(gwClient, gwNode, bufs); close(done) }()
	t.Cleanup(func() { client.Close(); server.Close(); <-done })
	return client, server
}
