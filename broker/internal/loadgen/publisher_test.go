package loadgen

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	"berth.dev/broker/packet"
)

// discardClient returns a client whose connection goes to a loopback
// listener that reads and drops everything: the publisher's send path
// without a broker behind it.
func discardClient(tb testing.TB) *client {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		io.Copy(io.Discard, c)
		c.Close()
	}()
	conn, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	return &client{conn: conn, version: packet.Version311, r: packet.NewReader(conn, 64),
		w: bufio.NewWriterSize(conn, 32<<10), recvMax: 65535}
}

// TestPublishPathAllocs pins the per-message QoS 0 send path (stamp,
// buffered write) at zero allocations.
func TestPublishPathAllocs(t *testing.T) {
	p, err := newPublisher(0, discardClient(t), "bench/t/0", 0, 64, 100)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	start := time.Now()
	if n := testing.AllocsPerRun(20, func() {
		if err := p.run(done, start, 0, 500); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("publishing 500 messages allocates %v times", n)
	}
	if got := p.sent.Load(); got != 21*500 {
		t.Fatalf("sent %d, want %d", got, 21*500)
	}
}

func BenchmarkPublishQoS0(b *testing.B) {
	p, err := newPublisher(0, discardClient(b), "bench/t/0", 0, 64, 100)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(p.tmpl)))
	b.ResetTimer()
	if err := p.run(make(chan struct{}), time.Now(), 0, b.N); err != nil {
		b.Fatal(err)
	}
}
