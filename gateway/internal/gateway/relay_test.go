package gateway

import (
	"io"
	"net"
	"testing"
	"time"
)

// tcpPair returns the two ends of a real loopback TCP connection.
func tcpPair(t testing.TB) (a, b net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	a, err = net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b = <-accepted
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// Whichever side hangs up, the other is closed too, after everything the
// closing side sent has been delivered.
func TestRelayClosesBothSidesWhenEitherEnds(t *testing.T) {
	for _, tc := range []struct {
		name       string
		nodeCloses bool
	}{{"node hangs up", true}, {"device hangs up", false}} {
		t.Run(tc.name, func(t *testing.T) {
			device, gwClient := tcpPair(t)
			gwNode, node := tcpPair(t)
			done := make(chan struct{})
			go func() { relay(gwClient, gwNode, newBufPool()); close(done) }()

			closer, other := node, device
			if !tc.nodeCloses {
				closer, other = device, node
			}
			if _, err := closer.Write([]byte("last words")); err != nil {
				t.Fatal(err)
			}
			closer.Close()
			other.SetReadDeadline(time.Now().Add(5 * time.Second))
			got, err := io.ReadAll(other)
			if err != nil {
				t.Fatalf("the other side was not closed: %v (read %q)", err, got)
			}
			if string(got) != "last words" {
				t.Fatalf("read %q before the close, want the closing side's last bytes", got)
			}
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("relay did not return")
			}
		})
	}
}

// A node that ends a connection while the device is still sending (a
// DISCONNECT 0x93 to a client that does not read, say) half-closes and
// reads on; the relay passes the half-close on and keeps carrying the
// device's input, so the device's writes all succeed and it reads the
// node's last bytes and a clean end of stream, never a reset.
func TestRelayLetsTheDeviceReadTheNodesLastWordsWhileSending(t *testing.T) {
	device, gwClient := tcpPair(t)
	gwNode, node := tcpPair(t)
	done := make(chan struct{})
	go func() { relay(gwClient, gwNode, newBufPool()); close(done) }()

	// The device sends 8 MiB without reading; the node answers its first
	// bytes with its last words and stops handling input, discarding it.
	sent := make(chan error, 1)
	go func() {
		chunk := make([]byte, 64<<10)
		for range 128 {
			if _, err := device.Write(chunk); err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	if _, err := io.ReadFull(node, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := node.Write([]byte("DISCONNECT 0x93")); err != nil {
		t.Fatal(err)
	}
	if err := node.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	discarded := make(chan struct{})
	go func() {
		node.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, _ = io.Copy(io.Discard, node) // until the device's input ends
		close(discarded)
	}()

	select {
	case err := <-sent:
		if err != nil {
			t.Fatalf("the device's write failed after the node ended its side: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the device's writes never completed")
	}
	device.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(device)
	if err != nil || string(got) != "DISCONNECT 0x93" {
		t.Fatalf("the device read %q, %v; want the node's last words and a clean end of stream", got, err)
	}
	device.Close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("relay did not return after the device closed")
	}
	<-discarded
}
