package gateway

import (
	"io"
	"net"
	"testing"
	"time"
)

// tcpPair returns the two ends of a real loopback TCP connection.
func tcpPair(t *testing.T) (a, b net.Conn) {
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
