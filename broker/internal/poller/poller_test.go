//go:build linux

package poller

import (
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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

// chanWaker signals each Wake and Due on its channels (nil: ignored).
type chanWaker struct{ wake, due chan struct{} }

func (w chanWaker) Wake() {
	if w.wake != nil {
		w.wake <- struct{}{}
	}
}

func (w chanWaker) Due() {
	if w.due != nil {
		w.due <- struct{}{}
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
	key := p.Watch(chanWaker{wake: woke})

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
	key2 := p.Watch(chanWaker{wake: woke})
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

// TestAfter: a filed key gets one Due at the first tick at or after its
// time, not before and not again; an unwatched key gets none; the wait
// loop, waiting without a timeout while the wheel was empty, is woken by
// the first key filed.
func TestAfter(t *testing.T) {
	p, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	due := make(chan struct{}, 8)
	key := p.Watch(chanWaker{due: due})
	gone := p.Watch(chanWaker{due: due})
	start := time.Now()
	at := start.Add(1200 * time.Millisecond)
	p.After(key, at)
	p.After(gone, at)
	p.Unwatch(gone)
	select {
	case <-due:
	case <-time.After(5 * time.Second):
		t.Fatal("no Due")
	}
	if now := time.Now(); now.Before(at) {
		t.Fatalf("Due %v before its time", at.Sub(now))
	}
	t.Logf("Due %v after its time", time.Since(at))
	select {
	case <-due:
		t.Fatal("a second Due, or one for an unwatched key")
	case <-time.After(1500 * time.Millisecond):
	}
}

// TestWheel: keys come round at their second's tick, a second already
// drained is the next one, a key filed more than a revolution ahead comes
// round early (its Waker files it again), and a late tick drains every
// second it missed.
func TestWheel(t *testing.T) {
	var w wheel
	const now = 1_000_000
	if !w.add(1, now+2, now) {
		t.Fatal("first key: not reported as the first")
	}
	w.add(2, now+3, now)
	w.add(3, now-5, now) // in the past: the next tick
	w.add(4, now+wheelSlots+2, now)
	var got []uint64
	if got = w.due(now+1, got[:0]); len(got) != 1 || got[0] != 3 {
		t.Fatalf("tick now+1: %v, want [3]", got)
	}
	if got = w.due(now+2, got[:0]); len(got) != 2 || got[0] != 1 || got[1] != 4 {
		t.Fatalf("tick now+2: %v, want [1 4] (4 a revolution early)", got)
	}
	w.add(5, now+10, now+2)
	if got = w.due(now+200, got[:0]); len(got) != 2 || got[0] != 2 || got[1] != 5 {
		t.Fatalf("late tick: %v, want [2 5]", got)
	}
	if w.n != 0 {
		t.Fatalf("%d keys left", w.n)
	}
}

// TestDisarm: a disarmed descriptor leaves the epoll set (ADD works
// again, and input no longer wakes its key), which closing a duplicated
// descriptor would not do: the socket's other descriptor keeps it open.
func TestDisarm(t *testing.T) {
	p, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	server, client := socketPair(t)
	rc, err := server.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	dup := -1
	if err := rc.Control(func(fd uintptr) { dup, err = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil || dup < 0 {
		t.Fatalf("dup: %d, %v", dup, err)
	}
	defer unix.Close(dup)
	woke := make(chan struct{}, 8)
	key := p.Watch(chanWaker{wake: woke})
	if err := p.Arm(uintptr(dup), key, false); err != nil {
		t.Fatal(err)
	}
	if err := p.Arm(uintptr(dup), key, false); err == nil {
		t.Fatal("a second EPOLL_CTL_ADD of an armed descriptor succeeded")
	}
	if err := p.Disarm(uintptr(dup)); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	expectWake(t, woke, false)
	if err := p.Arm(uintptr(dup), key, false); err != nil { // ADD again: it had left the set
		t.Fatal(err)
	}
	expectWake(t, woke, true) // level triggered: the byte waiting is reported
	if err := p.Disarm(uintptr(dup)); err != nil {
		t.Fatal(err)
	}
}

// TestWaitHoldsNoThread: while nothing is ready the wait loop is parked in
// Go's netpoll ("IO wait"), with and without a key in the wheel (a
// deadline), not blocked in epoll_wait ("syscall"), where it would hold a
// P until the runtime's monitor took it back, up to 10 ms later: with one
// P, every wake of the loop then stalled every connection that long.
func TestWaitHoldsNoThread(t *testing.T) {
	p, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	if got := waitState(t); got != "IO wait" {
		t.Errorf("idle, the wait loop is in %q, want IO wait", got)
	}
	key := p.Watch(chanWaker{})
	p.After(key, time.Now().Add(time.Hour)) // pokes the loop, which waits with a deadline now
	if got := waitState(t); got != "IO wait" {
		t.Errorf("with a key filed, the wait loop is in %q, want IO wait", got)
	}
}

// waitState is the state the poller's wait goroutine settles in (its
// header in a goroutine dump: "IO wait", "syscall", ...), polled until it
// is no longer running or runnable.
func waitState(t *testing.T) string {
	t.Helper()
	buf := make([]byte, 1<<20)
	deadline := time.Now().Add(5 * time.Second)
	for {
		dump := string(buf[:runtime.Stack(buf, true)])
		for _, g := range strings.Split(dump, "\n\n") {
			if !strings.Contains(g, "poller.(*Poller).wait(") {
				continue
			}
			state, _, _ := strings.Cut(g[strings.Index(g, "[")+1:], "]")
			state, _, _ = strings.Cut(state, ",") // "IO wait, 2 minutes"
			if state != "running" && state != "runnable" {
				return state
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the poller's wait goroutine never settled")
		}
		runtime.Gosched()
	}
}
