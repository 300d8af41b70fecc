package shard

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"berth.dev/broker/internal/listener"
	"berth.dev/broker/internal/poller"
	"berth.dev/broker/packet"
)

// testBroker is a real shard behind a real TCP listener on 127.0.0.1:0.
type testBroker struct {
	shard *Shard
	addr  string
}

// startBroker runs a shard for the test; info is the ConnInfo template
// every connection gets (AllowAnonymous is forced on unless info sets an
// Authenticate func).
func startBroker(t testing.TB, opts Options, info ConnInfo) *testBroker {
	t.Helper()
	if opts.Logger == nil && os.Getenv("BERTH_TEST_LOG") != "" {
		opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if opts.SysInterval == 0 {
		opts.SysInterval = -1
	}
	if info.Authenticate == nil && !info.AllowAnonymous {
		info.AllowAnonymous = true
	}
	if opts.Poller == nil {
		// Idle connections park, as in the broker (park.go).
		opts.Poller = newTestPoller(t)
	}
	return serve(t, New(opts), info)
}

// startBrokerWith serves an existing shard, anonymous clients allowed.
func startBrokerWith(t testing.TB, sh *Shard) *testBroker {
	t.Helper()
	return serve(t, sh, ConnInfo{AllowAnonymous: true})
}

func serve(t testing.TB, sh *Shard, info ConnInfo) *testBroker {
	t.Helper()
	return &testBroker{shard: sh, addr: serveHooked(t, sh, info, nil)}
}

// serveHooked starts sh behind a listener on 127.0.0.1 until the test
// ends, calling accepted (if set) with each connection before serving it,
// and returns the address.
func serveHooked(t testing.TB, sh *Shard, info ConnInfo, accepted func(net.Conn)) string {
	t.Helper()
	return serveWrapped(t, sh, info, func(c net.Conn) net.Conn {
		if accepted != nil {
			accepted(c)
		}
		return c
	})
}

// serveWrapped is serveHooked serving what wrap makes of each connection.
func serveWrapped(t testing.TB, sh *Shard, info ConnInfo, wrap func(net.Conn) net.Conn) string {
	t.Helper()
	if err := sh.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := listener.NewAsync(nil, func(c net.Conn, remote string, done func()) {
		ci := info
		ci.RemoteAddr = remote
		sh.Serve(wrap(c), ci, done)
	})
	if err := srv.ServeTCP(ln); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Close(); err != nil {
			t.Errorf("listener close: %v", err)
		}
		if err := sh.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := srv.Wait(ctx); err != nil {
			t.Errorf("waiting for connections: %v", err)
		}
	})
	return ln.Addr().String()
}

// newTestPoller starts a poller closed when the test ends (after the
// shards it serves, whose cleanups come later).
func newTestPoller(t testing.TB) *poller.Poller {
	t.Helper()
	p, err := poller.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("poller close: %v", err)
		}
	})
	return p
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	eventuallyWithin(t, 10*time.Second, what, cond)
}

// eventuallyWithin is eventually with a wait of d, for a condition whose
// work scales with the machine's load (megabytes through loopback under
// -race beside other test binaries), not one that fails by being late.
func eventuallyWithin(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// rawClient speaks MQTT over a socket with the codec, byte for byte, so
// tests can send what no well-behaved client would.
type rawClient struct {
	t       testing.TB
	nc      net.Conn
	rd      *packet.Reader
	version byte
}

func dialRaw(t testing.TB, addr string, version byte) *rawClient {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	return &rawClient{t: t, nc: nc, rd: packet.NewReader(nc, 1024), version: version}
}

type appender interface {
	Append([]byte, byte) ([]byte, error)
}

func (r *rawClient) send(p appender) {
	r.t.Helper()
	b, err := p.Append(nil, r.version)
	if err != nil {
		r.t.Fatalf("encoding %T: %v", p, err)
	}
	r.sendBytes(b)
}

func (r *rawClient) sendBytes(b []byte) {
	r.t.Helper()
	_ = r.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.nc.Write(b); err != nil {
		r.t.Fatalf("write: %v", err)
	}
}

// next reads one packet; the body is copied so it stays valid.
func (r *rawClient) next() (packet.FixedHeader, []byte, error) {
	_ = r.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	fh, body, err := r.rd.ReadPacket(0)
	if err != nil {
		return fh, nil, err
	}
	return fh, append([]byte(nil), body...), nil
}

func (r *rawClient) read(want packet.Type) (packet.FixedHeader, []byte) {
	r.t.Helper()
	fh, body, err := r.next()
	if err != nil {
		r.t.Fatalf("reading %v: %v", want, err)
	}
	if fh.Type != want {
		r.t.Fatalf("got %v, want %v (body % x)", fh.Type, want, body)
	}
	return fh, body
}

func (r *rawClient) connect(c *packet.Connect) *packet.Connack {
	r.t.Helper()
	r.send(c)
	fh, body := r.read(packet.TypeConnack)
	var ack packet.Connack
	if err := ack.Decode(r.version, fh, body); err != nil {
		r.t.Fatalf("decoding CONNACK: %v", err)
	}
	return &ack
}

// connectOK connects with a client id and clean start and checks success.
func (r *rawClient) connectOK(clientID string) *packet.Connack {
	r.t.Helper()
	ack := r.connect(&packet.Connect{ClientID: []byte(clientID), CleanStart: true})
	if ack.Reason != packet.CodeSuccess {
		r.t.Fatalf("CONNACK %v", ack.Reason)
	}
	return ack
}

func (r *rawClient) publish() *packet.Publish {
	r.t.Helper()
	fh, body := r.read(packet.TypePublish)
	p := new(packet.Publish)
	if err := p.Decode(r.version, fh, body); err != nil {
		r.t.Fatalf("decoding PUBLISH: %v", err)
	}
	return p
}

func (r *rawClient) ack(want packet.Type) *packet.Ack {
	r.t.Helper()
	fh, body := r.read(want)
	a := new(packet.Ack)
	if err := a.Decode(r.version, fh, body); err != nil {
		r.t.Fatalf("decoding %v: %v", want, err)
	}
	return a
}

func (r *rawClient) subscribe(id uint16, props packet.Properties, subs ...packet.Subscription) []packet.ReasonCode {
	r.t.Helper()
	r.send(&packet.Subscribe{PacketID: id, Props: props, Subscriptions: subs})
	fh, body := r.read(packet.TypeSuback)
	var sa packet.Suback
	if err := sa.Decode(r.version, fh, body); err != nil {
		r.t.Fatalf("decoding SUBACK: %v", err)
	}
	if sa.PacketID != id {
		r.t.Fatalf("SUBACK id %d, want %d", sa.PacketID, id)
	}
	return sa.Reasons
}

// expectDisconnect reads an MQTT 5 DISCONNECT with the reason, then EOF.
func (r *rawClient) expectDisconnect(want packet.ReasonCode) {
	r.t.Helper()
	fh, body, err := r.next()
	for err == nil && fh.Type != packet.TypeDisconnect && fh.Type != packet.TypeConnack {
		fh, body, err = r.next() // deliveries and acks racing the disconnect
	}
	if err != nil {
		r.t.Fatalf("want DISCONNECT %v, got %v", want, err)
	}
	if fh.Type != packet.TypeDisconnect {
		r.t.Fatalf("want DISCONNECT %v, got %v", want, fh.Type)
	}
	var d packet.Disconnect
	if err := d.Decode(r.version, fh, body); err != nil {
		r.t.Fatalf("decoding DISCONNECT: %v", err)
	}
	if d.Reason != want {
		r.t.Fatalf("DISCONNECT reason %v, want %v", d.Reason, want)
	}
	r.expectClosed()
}

// expectClosed reads until the server closes the connection.
func (r *rawClient) expectClosed() {
	r.t.Helper()
	for {
		fh, _, err := r.next()
		if err == nil {
			if fh.Type == packet.TypePublish {
				continue
			}
			r.t.Fatalf("want close, got %v", fh.Type)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || isReset(err) {
			return
		}
		r.t.Fatalf("want close, got %v", err)
	}
}

func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) && !ne.Timeout()
}

// expectSilence checks that nothing arrives within d.
func (r *rawClient) expectSilence(d time.Duration) {
	r.t.Helper()
	_ = r.nc.SetReadDeadline(time.Now().Add(d))
	fh, _, err := r.rd.ReadPacket(0)
	if err == nil {
		r.t.Fatalf("unexpected %v", fh.Type)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		r.t.Fatalf("unexpected error %v", err)
	}
}

func v5Client(t testing.TB, b *testBroker, id string) *rawClient {
	t.Helper()
	c := dialRaw(t, b.addr, packet.Version5)
	c.connectOK(id)
	return c
}
