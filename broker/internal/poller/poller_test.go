//go:build linux

package poller

import (
	"net"
	"testing"
	"time"
)

// socketPair returns both ends of a loopback TCP connection.
func socketPair(t *testing.T) (server *net.TCPConn, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s.(*net.TCPConn), client
}

func arm(t *testing.T, p *Poller, c *net.TCPConn, key uint64, added bool) {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var aerr error
	if err := rc.Control(func(fd uintptr) { aerr = p.Arm(fd, key, added) }); err != nil {
		t.Fatal(err)
	}
	if aerr != nil {
		t.Fatal(aerr)
	}
}

func expectWake(t *testing.T, woke <-chan struct{}, want bool) {
	t.Helper()
	wait := 5 * time.Second
	if !want {
		wait = 100 * time.Millisecond // a wake-up that should not come
	}
	select {
	case <-woke:
		if !want {
			t.Fatal("woken while not armed")
		}
	case <-time.After(wait):
		if want {
			t.Fatal("not woken")
		}
	}
}

// TestWakeOnceEachArming: an armed socket wakes its key once when input
// comes, or at once when input is already there; not again until armed
// again (EPOLLONESHOT); the peer's close wakes it; an unwatched key
// wakes nobody.
func TestWakeOnceEachArming(t *testing.T) {
	p, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	server, client := socketPair(t)
	woke := make(chan struct{}, 8)
	key := p.Watch(func() { woke <- struct{}{} })

	arm(t, p, server, key, false)
	expectWake(t, woke, false) // nothing to read yet
	if _, err := client.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	expectWake(t, woke, true)
	if _, err := client.Write([]byte{2}); err != nil {
		t.Fatal(err)
	}
	expectWake(t, woke, false) // one shot: not re-armed

	// Input already buffered (two bytes unread) when armed: woken at once.
	arm(t, p, server, key, true)
	expectWake(t, woke, true)
	buf := make([]byte, 2)
	if _, err := server.Read(buf); err != nil {
		t.Fatal(err)
	}

	// The peer's close.
	arm(t, p, server, key, true)
	_ = client.Close()
	expectWake(t, woke, true)

	// Another socket, unwatched before its input comes.
	s2, c2 := socketPair(t)
	key2 := p.Watch(func() { woke <- struct{}{} })
	if key2 == key {
		t.Fatal("a key was reused")
	}
	arm(t, p, s2, key2, false)
	p.Unwatch(key2)
	if _, err := c2.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	expectWake(t, woke, false)
}

// TestClose: Close ends the wait loop; Arm then fails.
func TestClose(t *testing.T) {
	p, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	server, _ := socketPair(t)
	rc, _ := server.SyscallConn()
	var aerr error
	_ = rc.Control(func(fd uintptr) { aerr = p.Arm(fd, 1, false) })
	if aerr != ErrClosed {
		t.Fatalf("Arm after Close: %v", aerr)
	}
}
