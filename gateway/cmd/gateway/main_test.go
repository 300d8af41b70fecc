package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"syscall"
	"testing"
	"time"

	"berth.dev/testenv"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestSIGTERMDrains runs the whole binary's run function against real
// Postgres and Redis, sends the process SIGTERM, and checks that it stops
// accepting, cuts a lingering connection after the grace period and exits
// cleanly.
func TestSIGTERMDrains(t *testing.T) {
	rs := testenv.Redis(t)
	jwks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"keys":[]}`))
	}))
	defer jwks.Close()
	tcp, metrics := freeAddr(t), freeAddr(t)
	args := []string{
		"-listen", tcp, "-listen-ws", "", "-metrics-listen", metrics,
		"-database-url", testenv.DatabaseURL(t), "-redis-url", rs.URL, "-redis-prefix", rs.Prefix,
		"-proxy-secret", "0123456789abcdef0123456789abcdef", "-jwks-url", jwks.URL,
		"-gateway-id", "gw-sigterm", "-drain-grace", "300ms", "-log-format", "text",
	}
	done := make(chan error, 1)
	go func() { done <- run(args) }()

	var held net.Conn
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", tcp)
		if err == nil {
			held = c
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway not listening on %s: %v", tcp, err)
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
	defer held.Close()
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run returned %v after SIGTERM", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("gateway still running 10 s after SIGTERM")
	}
	t.Logf("exited %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	held.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := held.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("lingering connection not closed by the drain: %v", err)
	}
	if c, err := net.Dial("tcp", tcp); err == nil {
		c.Close()
		t.Fatal("still accepting after exit")
	}
	if n, _ := rs.Client.Exists(t.Context(), rs.Prefix+"gw:gw-sigterm").Result(); n != 0 {
		t.Fatal("heartbeat key left behind after a clean shutdown")
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
