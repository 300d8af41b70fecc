package listener_test

import (
	"net"
	"testing"
	"unsafe"

	"berth.dev/broker/internal/listener"
)

// TestDoneBoundOnce: every TCP connection's handler gets the same done
// func, bound once by the Server, not a method value made per connection
// (16 B each that a parked connection keeps: docs/idle-connections.md).
// A func value is a pointer to its closure: the same pointer is the same
// closure.
func TestDoneBoundOnce(t *testing.T) {
	closures := make(chan unsafe.Pointer, 3)
	srv := listener.NewAsync(nil, func(c net.Conn, _ string, done func()) {
		closures <- *(*unsafe.Pointer)(unsafe.Pointer(&done))
		_ = c.Close()
		done()
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.ServeTCP(ln); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var first unsafe.Pointer
	for i := range cap(closures) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		p := <-closures
		_ = c.Close()
		if i == 0 {
			first = p
		} else if p != first {
			t.Fatalf("connection %d got another done closure (%p, first %p): one allocated per connection", i, p, first)
		}
	}
}
