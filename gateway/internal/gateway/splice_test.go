package gateway

import (
	"bytes"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"berth.dev/broker/packet"
)

// spliceChildEnv marks the copy of the test binary that runs under strace.
const spliceChildEnv = "BERTH_GATEWAY_SPLICE_CHILD"

const splicePayload = 1 << 20

// TestRelaySplicesTCP proves that a plain TCP client's bytes go through the
// kernel (splice(2)) rather than through user space. The test re-runs
// itself under `strace -f -e trace=splice`; the child relays a 1 MiB
// PUBLISH to the node and its 1 MiB echo back through a real gateway, and
// the parent counts the bytes the traced splice calls moved.
func TestRelaySplicesTCP(t *testing.T) {
	if os.Getenv(spliceChildEnv) != "" {
		relayBigPublish(t)
		return
	}
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Fatalf("strace is required for this test (make test installs it): %v", err)
	}
	trace := filepath.Join(t.TempDir(), "strace.out")
	cmd := exec.Command(strace, "-f", "-qq", "-e", "trace=splice", "-e", "signal=none", "-o", trace,
		os.Args[0], "-test.run=^TestRelaySplicesTCP$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), spliceChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestRelaySplicesTCP") {
		t.Fatalf("child under strace: %v\n%s", err, out)
	}
	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	// Either whole:
	//   1234 splice(9, NULL, 14, NULL, 1048576, SPLICE_F_NONBLOCK) = 65536
	// or, when threads interleave, split in two lines:
	//   1234 splice(9, NULL, 14, NULL, 1048576, SPLICE_F_NONBLOCK <unfinished ...>
	//   1234 <... splice resumed>) = 65536
	re := regexp.MustCompile(`(?m)(?:splice\(.*\)|<\.\.\. splice resumed>.*)\s+=\s+(\d+)`)
	var calls, moved int
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		n, _ := strconv.Atoi(m[1])
		calls++
		moved += n
	}
	// Each relayed byte is spliced twice (socket -> pipe -> socket), in
	// both directions: at least 4 x 1 MiB in all.
	t.Logf("%d splice calls moved %d bytes", calls, moved)
	if moved < 4*splicePayload {
		t.Fatalf("splice moved %d bytes in %d calls, want >= %d: the relay copies through user space\n%s",
			moved, calls, 4*splicePayload, firstLines(string(b), 20))
	}
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}

// relayBigPublish connects with a raw MQTT 3.1.1 client and sends a 1 MiB
// PUBLISH that the node echoes back.
func relayBigPublish(t *testing.T) {
	e := newEnv(t, envOptions{})
	id, tok := e.credential(t, tenantAcme, nil)
	c, err := net.Dial("tcp", e.addr(KindTCP))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	connect := packet.Connect{CleanStart: true, KeepAlive: 30, ClientID: []byte("big"), Username: []byte(id), Password: []byte(tok)}
	out, err := connect.Append(nil, packet.Version311)
	if err != nil {
		t.Fatal(err)
	}
	payload := bytes.Repeat([]byte("0123456789abcdef"), splicePayload/16)
	pub := packet.Publish{Topic: []byte("devices/big"), Payload: payload}
	if out, err = pub.Append(out, packet.Version311); err != nil {
		t.Fatal(err)
	}
	// CONNECT and PUBLISH in one write: the gateway must forward the
	// PUBLISH bytes it did not read itself.
	go c.Write(out)
	r := packet.NewReader(c, 4096)
	fh, body, err := r.ReadPacket(0)
	var ack packet.Connack
	if err != nil || ack.Decode(packet.Version311, fh, body) != nil || ack.Reason != 0 {
		t.Fatalf("CONNACK: %v %+v", err, ack)
	}
	fh, body, err = r.ReadPacket(0)
	if err != nil {
		t.Fatal(err)
	}
	var echo packet.Publish
	if err := echo.Decode(packet.Version311, fh, body); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(echo.Payload, payload) {
		t.Fatalf("echo of %d bytes differs", len(echo.Payload))
	}
}

// relayPair returns a client conn whose bytes go through relay to a server
// conn, on real loopback TCP sockets. wrap hides the *net.TCPConn types so
// the relay takes the pooled-buffer path (as for TLS and WebSocket).
func relayPair(tb testing.TB, wrap bool) (client, server net.Conn) {
	tb.Helper()
	pair := func() (net.Conn, net.Conn) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		defer ln.Close()
		a, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			tb.Fatal(err)
		}
		b, err := ln.Accept()
		if err != nil {
			tb.Fatal(err)
		}
		return a, b
	}
	client, gwClient := pair()
	gwNode, server := pair()
	var x, y net.Conn = gwClient, gwNode
	if wrap {
		x, y = struct{ net.Conn }{gwClient}, struct{ net.Conn }{gwNode}
	}
	done := make(chan struct{})
	go func() { relay(x, y, newBufPool()); close(done) }()
	tb.Cleanup(func() { client.Close(); server.Close(); <-done })
	return client, server
}

func TestRelayCopiesBothWays(t *testing.T) {
	for _, wrap := range []bool{false, true} {
		t.Run(map[bool]string{false: "spliced", true: "pooled buffer"}[wrap], func(t *testing.T) {
			client, server := relayPair(t, wrap)
			up := bytes.Repeat([]byte("u"), 300_000)
			down := bytes.Repeat([]byte("d"), 200_000)
			go client.Write(up)
			go server.Write(down)
			gotUp := make([]byte, len(up))
			if _, err := io.ReadFull(server, gotUp); err != nil || !bytes.Equal(gotUp, up) {
				t.Fatalf("client -> server: %v", err)
			}
			gotDown := make([]byte, len(down))
			if _, err := io.ReadFull(client, gotDown); err != nil || !bytes.Equal(gotDown, down) {
				t.Fatalf("server -> client: %v", err)
			}
			client.Close() // one side closing ends the relay and closes the other
			server.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := server.Read(make([]byte, 1)); err != io.EOF {
				t.Fatalf("server read after the client closed: %v, want EOF", err)
			}
		})
	}
}

func TestPooledRelayAllocs(t *testing.T) {
	bufs := newBufPool()
	src := &bytes.Reader{}
	data := make([]byte, 256<<10)
	run := func() {
		src.Reset(data)
		bp := bufs.get()
		io.CopyBuffer(writerOnly{io.Discard}, readerOnly{src}, *bp)
		bufs.put(bp)
	}
	run() // fill the pool
	// Two small allocations (the interface wrappers) per relay, and never a
	// 32 KiB buffer: io.Copy without the pool would allocate one each time.
	if n := testing.AllocsPerRun(100, run); n > 2 {
		t.Fatalf("pooled copy allocates %v times per run, want <= 2", n)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 100 {
		run()
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / 100; per > 1024 {
		t.Fatalf("pooled copy allocates %d bytes per run: a relay buffer is not being reused", per)
	}
}

func benchmarkRelay(b *testing.B, wrap bool) {
	client, server := relayPair(b, wrap)
	const chunk = 64 << 10
	msg := make([]byte, chunk)
	buf := make([]byte, chunk)
	b.SetBytes(chunk)
	b.ReportAllocs()
	for b.Loop() {
		go client.Write(msg)
		if _, err := io.ReadFull(server, buf); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRelaySplice(b *testing.B) { benchmarkRelay(b, false) }
func BenchmarkRelayPooled(b *testing.B) { benchmarkRelay(b, true) }
