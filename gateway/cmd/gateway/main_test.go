package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

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

// otlpCollector is a stand-in OTLP/HTTP collector on 127.0.0.1 that
// records the spans exported to it as name (and reason, if it has one).
func otlpCollector(t *testing.T) (url string, spans func() []string) {
	t.Helper()
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(b, &req)
		}
		if err != nil || r.URL.Path != "/v1/traces" {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				for _, sp := range ss.GetSpans() {
					s := sp.GetName()
					for _, kv := range sp.GetAttributes() {
						if kv.GetKey() == "reason" {
							s += " " + kv.GetValue().GetStringValue()
						}
					}
					got = append(got, s)
				}
			}
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

// TestSIGTERMDrains runs the whole binary's run function against real
// Postgres and Redis, sends the process SIGTERM, and checks that it stops
// accepting, cuts a lingering connection after the grace period, flushes
// its sampled spans to the OTLP collector and exits cleanly.
func TestSIGTERMDrains(t *testing.T) {
	rs := testenv.Redis(t)
	jwks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"keys":[]}`))
	}))
	defer jwks.Close()
	tcp, metrics := freeAddr(t), freeAddr(t)
	otlp, exported := otlpCollector(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp)
	args := []string{
		"-trace-sample", "1",
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
	// A malformed CONNECT, refused: its spans wait in the OTLP batcher
	// (up to 5 s) until the shutdown flushes them.
	bad, err := net.Dial("tcp", tcp)
	if err != nil {
		t.Fatal(err)
	}
	bad.SetDeadline(time.Now().Add(5 * time.Second))
	bad.Write([]byte{0x10, 0x0C, 0x00, 0x04, 'M', 'Q', 'T', 'T', 0x04, 0x03, 0x00, 0x3C, 0x00, 0x00})
	if _, err := io.ReadAll(bad); err != nil {
		t.Fatalf("malformed CONNECT not closed: %v", err)
	}
	bad.Close()
	start := time.Now()
	sigterm(t, done)
	t.Logf("exited %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	held.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := held.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("lingering connection not closed by the drain: %v", err)
	}
	if c, err := net.Dial("tcp", tcp); err == nil {
		c.Close()
		t.Fatal("still accepting after exit")
	}
	got := exported()
	slices.Sort(got)
	if want := []string{"gateway.connect malformed", "gateway.connect shutting_down", "parse", "parse"}; !slices.Equal(got, want) {
		t.Fatalf("spans exported over OTLP by the shutdown: %q, want %q", got, want)
	}
	if keys, _ := rs.Client.Keys(t.Context(), rs.Prefix+"*").Result(); len(keys) != 0 {
		t.Fatalf("Redis keys left behind after a clean shutdown: %q", keys)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestRedisModeFlags: the Redis topology is chosen by flags (or their
// BERTH_ variables), and a contradictory choice stops the gateway before
// it connects to anything.
func TestRedisModeFlags(t *testing.T) {
	base := []string{"-database-url", "postgres://127.0.0.1:1/x", "-jwks-url", "http://127.0.0.1:1/jwks",
		"-proxy-secret", "0123456789abcdef0123456789abcdef"}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"none", nil, nil, "-redis-url (REDIS_URL), or -redis-addrs"},
		{"url and cluster", []string{"-redis-url", "redis://127.0.0.1:1/0", "-redis-cluster", "-redis-addrs", "127.0.0.1:1"}, nil, "not both"},
		{"sentinel from the environment, cluster flag", []string{"-redis-cluster"},
			map[string]string{"BERTH_REDIS_SENTINEL_MASTER": "berth", "BERTH_REDIS_ADDRS": "127.0.0.1:1"}, "exclude each other"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("REDIS_URL", "")
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			err := run(append(slices.Clone(base), tc.args...))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("run = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// sigterm sends this process SIGTERM and waits for run, whose result done
// carries, to return nil: at most 10 s.
func sigterm(t *testing.T, done <-chan error) {
	t.Helper()
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run returned %v after SIGTERM", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("gateway still running 10 s after SIGTERM")
	}
}
