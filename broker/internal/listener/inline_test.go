package listener_test

import (
	"net"
	"runtime"
	"strings"
	"testing"

	"berth.dev/broker/internal/listener"
)

// onAcceptLoop reports whether the calling goroutine is the accept loop's
// (the handler called by it, not on a goroutine of its own).
func onAcceptLoop() bool {
	pcs := make([]uintptr, 32)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		f, more := frames.Next()
		if strings.HasSuffix(f.Function, ".acceptLoop") {
			return true
		}
		if !more {
			return false
		}
	}
}

// TestInline: a Server told Inline calls its handler on the accept loop,
// starting no goroutine per TCP connection (a connect storm then starts
// none: docs/idle-connections.md, "Handshakes bounded"); one not told so
// starts one per connection, as before.
func TestInline(t *testing.T) {
	for _, inline := range []bool{true, false} {
		calls := make(chan bool, 3)
		srv := listener.NewAsync(nil, func(c net.Conn, _ string, done func()) {
			calls <- onAcceptLoop()
			_ = c.Close()
			done()
		})
		if inline {
			srv.Inline()
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.ServeTCP(ln); err != nil {
			t.Fatal(err)
		}
		for i := range cap(calls) {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			if got := <-calls; got != inline {
				t.Errorf("inline %v, connection %d: handler on the accept loop %v", inline, i, got)
			}
			_ = c.Close()
		}
		if err := srv.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
