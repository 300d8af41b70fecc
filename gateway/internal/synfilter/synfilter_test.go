package synfilter

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"
)

// dropWait is how long a dial waits for a SYN-ACK before counting its SYN
// as dropped. On loopback an answered SYN is answered in microseconds; a
// dropped one is retransmitted only after the kernel's 1 s RTO.
const dropWait = 300 * time.Millisecond

// listen opens a TCP listener on addr with f attached; it accepts and
// echoes every connection until the test ends.
func listen(t *testing.T, f *Filter, addr string) net.Listener {
	t.Helper()
	ln := tcpListen(t, addr)
	if err := f.Attach(ln.(*net.TCPListener)); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln
}

// tcpListen listens on plain TCP: Go listens on Multipath TCP by default,
// where the kernel takes no socket filter.
func tcpListen(t *testing.T, addr string) net.Listener {
	t.Helper()
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

func newFilter(t *testing.T, rate float64, burst int) *Filter {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("loading a BPF program needs root (or CAP_BPF): run the gateway's tests as root")
	}
	f, err := New(rate, burst)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// dial connects from src (port 0) to addr, or reports that its SYN went
// unanswered within dropWait (dropped).
func dial(t *testing.T, src, addr string) (c net.Conn, dropped bool) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: dropWait}
	c, err := d.Dial("tcp", addr)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil, true
	}
	if err != nil {
		t.Fatalf("dial from %s: %v", src, err)
	}
	t.Cleanup(func() { c.Close() })
	return c, false
}

// echo checks that bytes go through c both ways whole: the filter passes
// a segment's every byte (a socket filter's return value is what it
// keeps).
func echo(t *testing.T, c net.Conn) {
	t.Helper()
	msg := make([]byte, 64<<10)
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	go func() { _, _ = c.Write(msg) }()
	got := make([]byte, len(msg))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("echo: %v", err)
	}
	for i := range got {
		if got[i] != msg[i] {
			t.Fatalf("echo: byte %d is %#x, want %#x", i, got[i], msg[i])
		}
	}
}

// TestDropsSYNsOverTheBucket connects from one loopback address over its
// burst: the SYNs over it are dropped in the kernel (the dial times out,
// the counter grows), another address is not affected, and the first gets
// through again once its bucket has refilled.
func TestDropsSYNsOverTheBucket(t *testing.T) {
	const rate, burst = 4, 3
	f := newFilter(t, rate, burst)
	addr := listen(t, f, "127.0.0.1:0").Addr().String()

	for i := range burst {
		c, dropped := dial(t, "127.0.0.2", addr)
		if dropped {
			t.Fatalf("connect %d of a burst of %d was dropped", i+1, burst)
		}
		if i == 0 {
			echo(t, c) // through a socket that inherited the filter
		}
	}
	start := time.Now()
	if _, dropped := dial(t, "127.0.0.2", addr); !dropped {
		t.Fatalf("connect %d from one source within %v was answered, want its SYN dropped", burst+1, time.Since(start))
	}
	if n := f.Dropped(); n != 1 {
		t.Fatalf("Dropped() = %d after one SYN over the burst, want 1", n)
	}

	if _, dropped := dial(t, "127.0.0.3", addr); dropped {
		t.Fatal("another source's first connect was dropped")
	}

	// One token comes back every 1/rate s: poll until the first source
	// gets through again, bounded.
	deadline := time.Now().Add(5 * time.Second)
	tries := 1
	for {
		c, dropped := dial(t, "127.0.0.2", addr)
		if !dropped {
			echo(t, c)
			break
		}
		tries++
		if time.Now().After(deadline) {
			t.Fatalf("127.0.0.2 still dropped after %d tries over 5 s", tries)
		}
	}
	t.Logf("127.0.0.2 got through again %v after its burst, %d connects dropped in between", time.Since(start).Round(time.Millisecond), tries)
	if n := f.Dropped(); n != uint64(tries) {
		t.Errorf("Dropped() = %d, want %d (one per timed-out connect)", n, tries)
	}
}

// TestDropsIPv6 does the same over IPv6 loopback, whose source key is
// its /64.
func TestDropsIPv6(t *testing.T) {
	f := newFilter(t, 1, 2)
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Fatalf("no IPv6 loopback: %v", err)
	}
	ln.Close()
	addr := listen(t, f, "[::1]:0").Addr().String()
	for i := range 2 {
		if _, dropped := dial(t, "::1", addr); dropped {
			t.Fatalf("IPv6 connect %d of a burst of 2 was dropped", i+1)
		}
	}
	if _, dropped := dial(t, "::1", addr); !dropped {
		t.Fatal("the third IPv6 connect was answered, want its SYN dropped")
	}
	if n := f.Dropped(); n != 1 {
		t.Fatalf("Dropped() = %d, want 1", n)
	}
}

// TestDetach: a connection the filter was detached from keeps working.
func TestDetach(t *testing.T) {
	f := newFilter(t, 100, 10)
	ln := tcpListen(t, "127.0.0.1:0")
	if err := f.Attach(ln.(*net.TCPListener)); err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	c, _ := dial(t, "127.0.0.1", ln.Addr().String())
	s, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	defer s.Close()
	if err := Detach(s.(*net.TCPConn)); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	go func() { _, _ = io.Copy(s, s) }()
	echo(t, c)
}

// TestAttachRefusedOnMultipathTCP: Go's default listener is Multipath
// TCP, where the kernel takes no socket filter; Attach says so.
func TestAttachRefusedOnMultipathTCP(t *testing.T) {
	f := newFilter(t, 100, 10)
	var lc net.ListenConfig
	lc.SetMultipathTCP(true)
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if p := protocol(t, ln.(*net.TCPListener)); p != ipprotoMPTCP {
		t.Fatalf("the listener's protocol is %d, not Multipath TCP (%d): no MPTCP in this kernel?", p, ipprotoMPTCP)
	}
	if err := f.Attach(ln.(*net.TCPListener)); !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Fatalf("Attach on a Multipath TCP listener: %v, want EOPNOTSUPP", err)
	}
}

func TestNewRefusesBadLimits(t *testing.T) {
	for _, tc := range []struct {
		rate  float64
		burst int
	}{{0, 1}, {1, 0}, {-1, 5}, {2e9, 1}} {
		if f, err := New(tc.rate, tc.burst); err == nil {
			f.Close()
			t.Errorf("New(%v, %d) succeeded", tc.rate, tc.burst)
		}
	}
}

const ipprotoMPTCP = 262

// protocol is a socket's SO_PROTOCOL.
func protocol(t *testing.T, c syscall.Conn) int {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var p int
	var gerr error
	if err := rc.Control(func(fd uintptr) { p, gerr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_PROTOCOL) }); err != nil {
		t.Fatal(err)
	}
	if gerr != nil {
		t.Fatal(gerr)
	}
	return p
}

// TestHold puts a source with tokens left on hold: its SYNs are dropped
// at once, another source's are not, and once the hold is over it gets
// through again at its rate, without a fresh burst.
func TestHold(t *testing.T) {
	// One token each 500 ms: over the 300 ms a dropped dial waits, so the
	// first connect through after the hold leaves none for a second.
	const rate, burst = 2, 5
	f := newFilter(t, rate, burst)
	addr := listen(t, f, "127.0.0.1:0").Addr().String()
	if _, dropped := dial(t, "127.0.0.4", addr); dropped {
		t.Fatal("the first connect was dropped")
	}
	const hold = time.Second
	held := time.Now()
	if err := f.Hold(netip.MustParsePrefix("127.0.0.4/32"), hold); err != nil {
		t.Fatal(err)
	}
	if _, dropped := dial(t, "127.0.0.4", addr); !dropped {
		t.Fatal("a held source's connect was answered, with 4 of its burst of 5 left")
	}
	if _, dropped := dial(t, "127.0.0.5", addr); dropped {
		t.Fatal("another source's connect was dropped")
	}
	// Dial until it passes (each dropped try waits dropWait), bounded.
	deadline := time.Now().Add(hold + 5*time.Second)
	for {
		c, dropped := dial(t, "127.0.0.4", addr)
		if !dropped {
			echo(t, c)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("127.0.0.4 still dropped %v after a hold of %v", time.Since(held), hold)
		}
	}
	if since := time.Since(held); since < hold {
		t.Fatalf("127.0.0.4 got through %v after a hold of %v", since, hold)
	}
	// Its bucket was left empty: the very next connect is over it.
	if _, dropped := dial(t, "127.0.0.4", addr); !dropped {
		t.Error("right after its hold a source got a second connect through at once: its burst refilled")
	}
	t.Logf("held for %v, through again after %v", hold, time.Since(held).Round(time.Millisecond))

	for _, bad := range []string{"127.0.0.0/24", "2001:db8::/48", "2001:db8::1/128"} {
		if err := f.Hold(netip.MustParsePrefix(bad), hold); err == nil {
			t.Errorf("Hold(%s) = nil, want an error: not a source", bad)
		}
	}
}

// TestHoldIPv6 holds a /64: another address of it is held too.
func TestHoldIPv6(t *testing.T) {
	f := newFilter(t, 20, 5)
	addr := listen(t, f, "[::1]:0").Addr().String()
	if err := f.Hold(netip.MustParsePrefix("::/64"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, dropped := dial(t, "::1", addr); !dropped {
		t.Fatal("a connect from a held /64 was answered")
	}
}
