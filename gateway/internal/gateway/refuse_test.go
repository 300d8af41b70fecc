package gateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"berth.dev/broker/packet"
	"berth.dev/testenv"
)

// resetAtAccept dials addr from the local IP from and asserts that the
// gateway reset the connection (an RST, not a FIN) without writing a
// byte. The reset reaches the dial when it lands before the dialer checks
// the finished handshake (SO_ERROR), else the first read. Nothing is
// written first: a write that met the RST would take the reset error and
// leave the read an EOF.
func resetAtAccept(t *testing.T, from, addr string) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if errors.Is(err, syscall.ECONNRESET) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(make([]byte, 16))
	if n != 0 || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read %d bytes, %v: want the connection reset unread", n, err)
	}
}

// TestRefusedAtAcceptReset: a connection refused at accept, by each of
// the accept-time limits, is reset (the device reads ECONNRESET) and
// leaves no socket in TIME_WAIT on the gateway's port, while a CONNECT
// refused after it was read still gets its CONNACK and a normal close.
func TestRefusedAtAcceptReset(t *testing.T) {
	const refused = 10
	for _, tc := range []struct {
		scope  string
		config func(*Config)
	}{
		{"ip", func(c *Config) { c.PerIPRate, c.PerIPBurst = 0.001, 1 }},
		{"global", func(c *Config) { c.AcceptRate, c.AcceptBurst = 0.001, 1 }},
		{"pending", func(c *Config) { c.MaxPendingPerIP, c.ConnectTimeout = 1, 30*time.Second }},
	} {
		t.Run(tc.scope, func(t *testing.T) {
			e := newEnv(t, envOptions{config: tc.config})
			gw := e.addr(KindTCP)
			heldOpen(t, dialFrom(t, "127.0.0.1", gw)) // spends the burst, or holds the one pending slot
			for range refused {
				resetAtAccept(t, "127.0.0.1", gw)
			}
			waitUntil(t, func() bool {
				return strings.Contains(scrape(t, e), fmt.Sprintf(`berth_gateway_rate_limited_total{scope=%q} %d`, tc.scope, refused))
			})
			if n := timeWaitOn(t, gw); n != 0 {
				t.Fatalf("%d sockets in TIME_WAIT on the gateway's port after %d refusals at accept, want 0", n, refused)
			}
		})
	}
	t.Run("refused CONNECT: CONNACK, then a normal close", func(t *testing.T) {
		e := newEnv(t, envOptions{})
		// No user name: 3.1.1 return code 4, then EOF (rawConnect fails on a reset).
		if got, want := rawConnect(t, e.addr(KindTCP), noCredentialsConnect(t)), []byte{0x20, 0x02, 0x00, 0x04}; !bytes.Equal(got, want) {
			t.Fatalf("got % X, want % X", got, want)
		}
	})
}

// noCredentialsConnect is a 3.1.1 CONNECT without a user name or password,
// which the gateway refuses with return code 4 before any JWT work.
func noCredentialsConnect(t testing.TB) []byte {
	t.Helper()
	p := packet.Connect{CleanStart: true, KeepAlive: 30, ClientID: []byte("anon")}
	b, err := p.Append(nil, packet.Version311)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRefusedConnectLogBounded: a burst of refused CONNECTs writes the
// first refuseLogBurst "connect refused" lines of the interval and one
// summary line with the count of the rest (at the interval's end, or at
// Shutdown as here); the metrics count every refusal.
func TestRefusedConnectLogBounded(t *testing.T) {
	const extra = 25
	logs := &testenv.LogBuffer{}
	e := newEnv(t, envOptions{
		logger:  slog.New(slog.NewJSONHandler(logs, nil)),
		config:  func(c *Config) { c.PerIPRate, c.PerIPBurst = 1e6, 1e6 },
		prepare: func(g *Gateway) { g.refuseLog.every = time.Hour }, // one interval for the whole burst, on any machine
	})
	connect := noCredentialsConnect(t)
	for range refuseLogBurst + extra {
		if got := rawConnect(t, e.addr(KindTCP), connect); len(got) != 4 || got[3] != 0x04 {
			t.Fatalf("CONNACK % X, want return code 4", got)
		}
	}
	waitUntil(t, func() bool {
		return strings.Contains(scrape(t, e), fmt.Sprintf(`berth_gateway_refusals_total{reason="bad_credentials",tenant_id=""} %d`, refuseLogBurst+extra))
	})
	if n := len(logs.Records(t, "connect refused")); n != refuseLogBurst {
		t.Fatalf("%d connect refused lines for %d refusals, want the first %d", n, refuseLogBurst+extra, refuseLogBurst)
	}
	if s := logs.Records(t, "connect refused; lines not logged"); len(s) != 0 {
		t.Fatalf("summary before the interval ended: %v", s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e.gw.Shutdown(ctx)
	s := logs.Records(t, "connect refused; lines not logged")
	if len(s) != 1 || s[0]["suppressed"] != float64(extra) {
		t.Fatalf("summary lines %v, want one with suppressed %d", s, extra)
	}
}

// BenchmarkRefuseAtAccept measures a connection refused by the per-IP
// connect rate on loopback, as a device of a flood sees it: dial, read
// until the gateway's close (or reset), close. It reports the gateway
// port's sockets left in TIME_WAIT afterwards (per op): a FIN close leaves
// one per refusal, an RST none; and the CPU time (user and system) of the
// whole process, client and gateway, per op.
func BenchmarkRefuseAtAccept(b *testing.B) {
	e := newEnv(b, envOptions{config: func(c *Config) { c.PerIPRate, c.PerIPBurst = 0.001, 1 }})
	addr := e.addr(KindTCP)
	first, err := net.Dial("tcp", addr) // spends the burst of one
	if err != nil {
		b.Fatal(err)
	}
	defer first.Close()
	buf := make([]byte, 1)
	tw0, cpu0 := timeWaitOn(b, addr), processCPU(b)
	b.ReportAllocs()
	for b.Loop() {
		c, err := net.Dial("tcp", addr)
		if errors.Is(err, syscall.ECONNRESET) { // reset before the dial's check of the handshake
			continue
		}
		if err != nil {
			b.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(buf); n != 0 || isTimeout(err) {
			b.Fatalf("rate-limited connection: read %d, %v", n, err)
		}
		c.Close()
	}
	b.StopTimer()
	b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(timeWaitOn(b, addr)-tw0)/float64(b.N), "time-wait/op")
}

// processCPU is the user and system CPU time this process has used.
func processCPU(tb testing.TB) time.Duration {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// timeWaitOn counts the IPv4 sockets in TIME_WAIT whose local address is
// addr (the gateway's side of closed connections), from /proc/net/tcp.
func timeWaitOn(tb testing.TB, addr string) int {
	tb.Helper()
	ap := addrPort(mustTCPAddr(tb, addr))
	ip := ap.Addr().As4()
	// /proc/net/tcp writes the address as the host-order hex of the
	// network-order word: 127.0.0.1:80 is 0100007F:0050 on little-endian.
	local := fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], ap.Port())
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) > 3 && fs[1] == local && fs[3] == "06" { // 06: TCP_TIME_WAIT
			n++
		}
	}
	return n
}

func mustTCPAddr(tb testing.TB, addr string) *net.TCPAddr {
	tb.Helper()
	a, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	return a
}
