package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/iotest"
	"time"

	"berth.dev/broker/packet"
)

// chunkReader hands out b at most n bytes per Read, then io.EOF.
type chunkReader struct {
	b   []byte
	off int
	n   int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if r.off == len(r.b) {
		return 0, io.EOF
	}
	m := copy(p[:min(len(p), r.n)], r.b[r.off:])
	r.off += m
	return m, nil
}

func mustConnect(t testing.TB, version byte, p packet.Connect) []byte {
	t.Helper()
	b, err := p.Append(nil, version)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestReadConnectGrowsAsBytesArrive(t *testing.T) {
	big := mustConnect(t, packet.Version5, packet.Connect{
		CleanStart: true, KeepAlive: 30, ClientID: []byte("big"),
		UsernameFlag: true, Username: []byte("crd_1"),
		PasswordFlag: true, Password: bytes.Repeat([]byte("p"), 40<<10), // many chunks
	})
	next := []byte{0xC0, 0x00} // a PINGREQ after the CONNECT: must not be consumed
	for _, tc := range []struct {
		name string
		r    func(io.Reader) io.Reader
	}{
		{"whole", func(r io.Reader) io.Reader { return r }},
		{"one byte at a time", iotest.OneByteReader},
		{"half reads", iotest.HalfReader},
		{"odd chunks", func(r io.Reader) io.Reader { return bufio.NewReaderSize(r, 16) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := bytes.NewReader(append(append([]byte{}, big...), next...))
			raw, fh, body, err := readConnect(tc.r(src), 64<<10)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(raw, big) || fh.Type != packet.TypeConnect || len(body) != fh.Remaining {
				t.Fatalf("read %d bytes (type %d, body %d), want the %d-byte CONNECT", len(raw), fh.Type, len(body), len(big))
			}
			if cap(raw) > 2*len(raw)+connectChunk {
				t.Fatalf("buffer capacity %d for a %d-byte CONNECT", cap(raw), len(raw))
			}
			if tc.name != "odd chunks" { // bufio reads ahead by design
				rest, _ := io.ReadAll(src)
				if !bytes.Equal(rest, next) {
					t.Fatalf("left % X unread, want % X", rest, next)
				}
			}
		})
	}
	t.Run("ends early", func(t *testing.T) {
		_, _, _, err := readConnect(&chunkReader{b: big[:len(big)/2], n: 1000}, 64<<10)
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("err %v, want io.ErrUnexpectedEOF", err)
		}
	})
}

// unreadByGateway returns how many of the peers (by their local ports)
// have a connection to the gateway's port in /proc/net/tcp, and the bytes
// they sent that the gateway has not read yet (its receive queues).
func unreadByGateway(t *testing.T, gwPort int, peers map[int]bool) (found, unread int) {
	t.Helper()
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 5 || f[3] != "01" { // ESTABLISHED
			continue
		}
		lport, err1 := hexPort(f[1])
		rport, err2 := hexPort(f[2])
		if err1 != nil || err2 != nil || lport != gwPort || !peers[rport] {
			continue
		}
		_, rx, _ := strings.Cut(f[4], ":")
		n, err := strconv.ParseInt(rx, 16, 64)
		if err != nil {
			t.Fatalf("/proc/net/tcp queue %q: %v", f[4], err)
		}
		found++
		unread += int(n)
	}
	return found, unread
}

func hexPort(hostPort string) (int, error) {
	_, p, _ := strings.Cut(hostPort, ":")
	n, err := strconv.ParseInt(p, 16, 32)
	return int(n), err
}

// TestSlowConnectPinsLittleMemory: peers announce a CONNECT of almost a
// MiB (under MaxConnectSize), send a hundred bytes of it and trickle the
// rest. The gateway holds what arrived, not what was announced, and closes
// each at the CONNECT deadline without an answer; a CONNECT announced over
// MaxConnectSize is closed at once, unread.
func TestSlowConnectPinsLittleMemory(t *testing.T) {
	if _, err := os.Stat("/proc/net/tcp"); err != nil {
		t.Fatalf("this test reads the gateway's receive queues from /proc/net/tcp: %v", err)
	}
	const (
		peers     = 64
		announced = 1<<20 - 8 // a Remaining Length under the cap
	)
	e := newEnv(t, envOptions{config: func(c *Config) {
		c.MaxConnectSize = 1 << 20
		c.ConnectTimeout = 1500 * time.Millisecond
		c.MaxPendingPerIP = peers + 1
		c.PerIPRate, c.PerIPBurst = 1e6, 1e6
	}})
	_, portStr, _ := net.SplitHostPort(e.addr(KindTCP))
	gwPort, _ := strconv.Atoi(portStr)

	// Announce a ~1 MiB CONNECT, then the start of its body.
	head := binaryRemaining(0x10, announced)
	head = append(head, 0x00, 0x04, 'M', 'Q', 'T', 'T', 0x05, 0xC2, 0x00, 0x3C)
	head = append(head, bytes.Repeat([]byte{0x00}, 100-10)...)

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	conns := make([]net.Conn, peers)
	ports := map[int]bool{}
	for i := range conns {
		conns[i] = dialFrom(t, "127.0.0.1", e.addr(KindTCP))
		ports[conns[i].LocalAddr().(*net.TCPAddr).Port] = true
		if _, err := conns[i].Write(head); err != nil {
			t.Fatal(err)
		}
	}
	// Every peer's bytes have been read by the gateway: it has parsed
	// each fixed header (where a whole-body buffer would be allocated)
	// and is waiting for more of the body.
	waitUntil(t, func() bool {
		found, unread := unreadByGateway(t, gwPort, ports)
		return found == peers && unread == 0
	})

	// Trickle a byte every 50 ms until the gateway closes each.
	var wg sync.WaitGroup
	answers := make([][]byte, peers)
	errs := make([]error, peers)
	for i, c := range conns {
		wg.Go(func() {
			stop := make(chan struct{})
			var tw sync.WaitGroup
			tw.Go(func() {
				for range 200 { // bounded: 10 s of trickling at most
					select {
					case <-stop:
						return
					case <-time.After(50 * time.Millisecond):
					}
					if _, err := c.Write([]byte{0x00}); err != nil {
						return
					}
				}
			})
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			answers[i], errs[i] = io.ReadAll(c)
			close(stop)
			tw.Wait()
		})
	}

	runtime.GC()
	var during runtime.MemStats
	runtime.ReadMemStats(&during)
	grown := int64(during.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("heap grew %d KiB for %d peers announcing %d KiB each", grown>>10, peers, announced>>10)
	if limit := int64(peers * 64 << 10); grown > limit { // 64 KiB a peer, against 1 MiB announced
		t.Errorf("heap grew %d KiB with %d slow CONNECTs pending, want under %d KiB", grown>>10, peers, limit>>10)
	}

	wg.Wait()
	for i := range conns {
		// A close with trickled bytes still unread is a reset: closed too.
		if (errs[i] != nil && !errors.Is(errs[i], syscall.ECONNRESET)) || len(answers[i]) != 0 {
			t.Fatalf("peer %d: read % X, %v; want closed at the CONNECT deadline without a CONNACK", i, answers[i], errs[i])
		}
	}
	want := fmt.Sprintf(`berth_gateway_refusals_total{reason="connect_timeout",tenant_id=""} %d`, peers)
	waitUntil(t, func() bool { return strings.Contains(scrape(t, e), want) })

	// Announcing more than MaxConnectSize (here the largest Remaining
	// Length MQTT can say, 256 MiB): closed at once, nothing allocated for it.
	if got := rawConnect(t, e.addr(KindTCP), binaryRemaining(0x10, 268_435_455)); len(got) != 0 {
		t.Fatalf("oversized CONNECT answered % X", got)
	}
	waitUntil(t, func() bool {
		return strings.Contains(scrape(t, e), `berth_gateway_refusals_total{reason="connect_too_large",tenant_id=""} 1`)
	})
}

// binaryRemaining is a fixed header: first byte b0, then n as a Variable
// Byte Integer [MQTT-1.5.5].
func binaryRemaining(b0 byte, n int) []byte {
	out := []byte{b0}
	for {
		d := byte(n % 128)
		n /= 128
		if n > 0 {
			d |= 0x80
		}
		out = append(out, d)
		if n == 0 {
			return out
		}
	}
}

// FuzzReadConnect: any byte stream, read in chunks of any size, either
// gives exactly one whole CONNECT no larger than the cap (and not a byte
// more: the rest of the stream is the node's), or an error; a CONNECT
// that does not decode gets a refusal whose CONNACK encodes; one that
// decodes reads back the same from its own encoding.
func FuzzReadConnect(f *testing.F) {
	creds := packet.Connect{CleanStart: true, KeepAlive: 60, ClientID: []byte("dev-1"),
		UsernameFlag: true, Username: []byte("crd_abc"), PasswordFlag: true, Password: []byte("eyJ.a.b")}
	will := creds
	will.WillFlag, will.WillQoS, will.WillTopic, will.WillPayload = true, 1, []byte("devices/1/gone"), []byte("bye")
	v5 := creds
	v5.Props.UserProperties = []packet.UserProperty{{Key: []byte("traceparent"), Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")}}
	for _, seed := range [][]byte{
		mustConnect(f, packet.Version311, creds),
		mustConnect(f, packet.Version311, will),
		mustConnect(f, packet.Version5, v5),
		mustConnect(f, packet.Version5, will),
		mustConnect(f, packet.Version31, creds),
		append(mustConnect(f, packet.Version311, creds), 0xC0, 0x00),                           // a PINGREQ behind it
		{0x10, 0x0C, 0x00, 0x04, 'M', 'Q', 'T', 'T', 0x06, 0x02, 0x00, 0x3C, 0x00, 0x00},       // protocol level 6
		{0x10, 0x0D, 0x00, 0x04, 'M', 'Q', 'T', 'T', 0x05, 0x03, 0x00, 0x3C, 0x00, 0x00, 0x00}, // reserved flag
		{0xC0, 0x00},             // not a CONNECT
		{0x10, 0xFF, 0xFF, 0xFF}, // unfinished length
		{0x10, 0xFF, 0xFF, 0xFF, 0xFF, 0x01},
		{0x10, 0xFF, 0x7F},
		{0x10},
		{},
	} {
		f.Add(seed, uint16(1))
		f.Add(seed, uint16(7))
		f.Add(seed, uint16(4096))
	}
	const maxSize = 2 << 10
	f.Fuzz(func(t *testing.T, in []byte, chunk uint16) {
		r := &chunkReader{b: in, n: int(chunk)%connectChunk + 1}
		raw, fh, body, err := readConnect(r, maxSize)
		if err != nil {
			if raw != nil || body != nil {
				t.Fatalf("error %v with a packet", err)
			}
			return
		}
		if len(raw) > maxSize || !bytes.Equal(raw, in[:len(raw)]) || r.off != len(raw) {
			t.Fatalf("read %d bytes (consumed %d) of %d: want one whole packet, nothing more, at most %d", len(raw), r.off, len(in), maxSize)
		}
		if fh.Type != packet.TypeConnect || len(body) != fh.Remaining || !bytes.Equal(body, raw[len(raw)-len(body):]) {
			t.Fatalf("header %+v, body %d bytes of %d", fh, len(body), len(raw))
		}
		var p packet.Connect
		if err := p.Decode(0, fh, body); err != nil {
			rf := decodeRefusal(&p, err)
			if rf.code != 0 && rf.connack(p.Version) == nil {
				t.Fatalf("refusal %s for %v has no CONNACK", rf.label, err)
			}
			return
		}
		again, err := p.Append(nil, p.Version)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		raw2, fh2, body2, err := readConnect(bytes.NewReader(again), maxSize+len(again))
		if err != nil {
			t.Fatalf("read back the re-encoding: %v", err)
		}
		var p2 packet.Connect
		if err := p2.Decode(0, fh2, body2); err != nil || !bytes.Equal(raw2, again) {
			t.Fatalf("re-encoding does not read back: %v", err)
		}
		if string(p2.ClientID) != string(p.ClientID) || string(p2.Username) != string(p.Username) || string(p2.Password) != string(p.Password) {
			t.Fatalf("re-read CONNECT differs: %q/%q vs %q/%q", p2.ClientID, p2.Username, p.ClientID, p.Username)
		}
	})
}
