package loadgen

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestTrafficAccounting runs short bounded pub and pubsub runs against a
// real mosquitto and checks the counts exactly.
func TestTrafficAccounting(t *testing.T) {
	addr := startMosquitto(t, "set_tcp_nodelay true")
	const count = 300
	tests := []struct {
		name                 string
		mode                 Mode
		qos                  byte
		pubs, subs, topics   int
		v5                   bool
		wantPerSub, wantSubs uint64 // deliveries owed to each subscriber, subscribers
		basis                string
	}{
		{"pub qos0 counted by subscriber", ModePub, 0, 2, -1, 1, false, 2 * count, 1, "counted by subscribers"},
		{"pub qos0 without subscriber", ModePub, 0, 2, 0, 1, false, 0, 0, "written to the socket (QoS 0, no subscriber)"},
		{"pub qos1 acked", ModePub, 1, 3, -1, 1, false, 0, 0, "acknowledged"},
		{"pub qos2 acked", ModePub, 2, 2, -1, 1, false, 0, 0, "acknowledged"},
		{"pubsub qos1 fan-out", ModePubSub, 1, 1, 5, 1, false, count, 5, "acknowledged"},
		{"pubsub qos1 fan-in", ModePubSub, 1, 4, 1, 1, false, 4 * count, 1, "acknowledged"},
		{"pubsub qos2 two topics", ModePubSub, 2, 4, 4, 2, false, 2 * count, 4, "acknowledged"},
		{"pubsub qos1 mqtt5", ModePubSub, 1, 2, 2, 1, true, 2 * count, 2, "acknowledged"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(addr, tt.mode)
			cfg.QoS, cfg.Pubs, cfg.Subs, cfg.Topics, cfg.V5 = tt.qos, tt.pubs, tt.subs, tt.topics, tt.v5
			cfg.Count = count
			cfg.Inflight = 20
			r := runOK(t, cfg)
			if want := uint64(tt.pubs * count); r.Sent != want {
				t.Errorf("sent %d, want %d", r.Sent, want)
			}
			if tt.qos > 0 && (r.Acked != r.Sent || r.Unacked != 0 || r.Rejected != 0) {
				t.Errorf("acked %d unacked %d rejected %d of %d sent", r.Acked, r.Unacked, r.Rejected, r.Sent)
			}
			if uint64(r.Subs) != tt.wantSubs || len(r.PerSub) != int(tt.wantSubs) {
				t.Fatalf("subs %d (per-sub %d), want %d", r.Subs, len(r.PerSub), tt.wantSubs)
			}
			for j, s := range r.PerSub {
				if s.Expected != tt.wantPerSub || s.Delivered != tt.wantPerSub || s.Lost != 0 || s.Duplicates != 0 || s.Unexpected != 0 {
					t.Errorf("subscriber %d: %+v, want %d expected and delivered, nothing lost", j, s, tt.wantPerSub)
				}
			}
			if tt.wantSubs > 0 {
				if r.Latency == nil || r.Latency.Count != tt.wantPerSub*tt.wantSubs {
					t.Fatalf("latency %+v, want %d samples", r.Latency, tt.wantPerSub*tt.wantSubs)
				}
				if !(r.Latency.Min <= r.Latency.P50 && r.Latency.P50 <= r.Latency.P99 && r.Latency.P99 <= r.Latency.Max) {
					t.Errorf("latency percentiles out of order: %+v", r.Latency)
				}
				if r.DeliveredPerSec <= 0 {
					t.Errorf("delivered rate %v", r.DeliveredPerSec)
				}
			}
			if tt.qos > 0 && (r.AckLatency == nil || r.AckLatency.Count != r.Sent) {
				t.Errorf("ack latency %+v, want %d samples", r.AckLatency, r.Sent)
			}
			if r.AcceptedBasis != tt.basis {
				t.Errorf("accepted basis %q, want %q", r.AcceptedBasis, tt.basis)
			}
			if r.AcceptedPerSec <= 0 || r.AcceptedMBPerSec <= 0 {
				t.Errorf("accepted %v msg/s %v MB/s", r.AcceptedPerSec, r.AcceptedMBPerSec)
			}
		})
	}
}

// TestRateAndDuration checks that -rate paces and -duration stops a run.
func TestRateAndDuration(t *testing.T) {
	addr := startMosquitto(t)
	cfg := testConfig(addr, ModePubSub)
	cfg.Pubs, cfg.Subs, cfg.QoS = 1, 1, 1
	cfg.Rate = 200
	cfg.Duration = time.Second
	start := time.Now()
	r := runOK(t, cfg)
	if el := time.Since(start); el > cfg.Duration+cfg.Drain+5*time.Second {
		t.Errorf("run took %v", el)
	}
	// 200/s for 1 s: 200 or 201 messages (the first goes at t=0); never
	// more, which is the pacing. A loaded machine may stall the publisher
	// near the end, so the floor is loose.
	if r.Sent < 100 || r.Sent > 202 {
		t.Errorf("sent %d at 200/s for 1s", r.Sent)
	}
	if r.Delivered != r.Sent || r.Lost != 0 {
		t.Errorf("delivered %d lost %d of %d", r.Delivered, r.Lost, r.Sent)
	}
}

// TestTransports runs the same QoS 1 pubsub over TLS (mosquitto's own TLS
// listener) and over WebSocket.
func TestTransports(t *testing.T) {
	dir := t.TempDir()
	cert, key := selfSigned(t, dir)
	tlsPort := freePort(t)
	addr := startMosquitto(t,
		fmt.Sprintf("listener %d 127.0.0.1", tlsPort),
		"certfile "+cert,
		"keyfile "+key)
	tlsAddr := fmt.Sprintf("127.0.0.1:%d", tlsPort)
	waitListening(t, tlsAddr, nil, &strings.Builder{})
	tests := []struct {
		name      string
		addr      string
		set       func(*Config)
		transport string
	}{
		{"tls", tlsAddr, func(c *Config) { c.TLS, c.CAFile = true, cert }, "tls"},
		{"tls insecure", tlsAddr, func(c *Config) { c.TLS, c.TLSInsecure = true, true }, "tls"},
		{"websocket", wsBridge(t, addr), func(c *Config) { c.WS = true }, "ws"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(tt.addr, ModePubSub)
			cfg.Pubs, cfg.Subs, cfg.QoS, cfg.Count = 2, 2, 1, 100
			tt.set(&cfg)
			r := runOK(t, cfg)
			if r.Transport != tt.transport || r.Delivered != 400 || r.Lost != 0 {
				t.Errorf("transport %s delivered %d lost %d, want %s 400 0", r.Transport, r.Delivered, r.Lost, tt.transport)
			}
		})
	}
	t.Run("tls untrusted", func(t *testing.T) {
		cfg := testConfig(tlsAddr, ModePub)
		cfg.TLS, cfg.Count = true, 1
		if _, err := Run(context.Background(), cfg, nil); err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("Run with an unknown CA: %v, want a certificate error", err)
		}
	})
}

// TestConnLevels holds two levels against mosquitto and checks every
// session answered PINGREQ, and that -rss-pid's resident memory was read
// during each hold (this test's own process stands in for the broker).
func TestConnLevels(t *testing.T) {
	addr := startMosquitto(t)
	cfg := testConfig(addr, ModeConn)
	cfg.Levels = []int{20, 150}
	cfg.Hold = 50 * time.Millisecond
	cfg.DialConcurrency = 25
	cfg.RSSPid = os.Getpid()
	r := runOK(t, cfg)
	if len(r.Levels) != 2 {
		t.Fatalf("levels %+v", r.Levels)
	}
	for i, want := range cfg.Levels {
		l := r.Levels[i]
		if l.Target != want || l.Held != want || l.Failed != 0 || l.Connect == nil {
			t.Errorf("level %d: %+v, want %d held", i, l, want)
		}
		if l.HeldRSSKiB <= 0 {
			t.Errorf("level %d: held RSS %d KiB, want -rss-pid's VmRSS", i, l.HeldRSSKiB)
		}
	}
	if r.Levels[1].Connect.Count != 130 {
		t.Errorf("second level dialled %d, want only the 130 missing", r.Levels[1].Connect.Count)
	}
}

// TestConnFailuresClassified dials a port nobody listens on: every dial is
// refused, the level reports it by class and the run fails.
func TestConnFailuresClassified(t *testing.T) {
	cfg := testConfig(fmt.Sprintf("127.0.0.1:%d", freePort(t)), ModeConn)
	cfg.Levels = []int{10}
	cfg.Hold = 0
	r, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	l := r.Levels[0]
	if l.Held != 0 || l.Failed != 10 || l.Reasons[failRefused] != 10 || r.OK() {
		t.Fatalf("level %+v ok %v, want 10 refused and a failed run", l, r.OK())
	}
}

// TestConnackRejection checks that a CONNACK refusal is its own class:
// mosquitto without anonymous access refuses a CONNECT with no user name.
func TestConnackRejection(t *testing.T) {
	port := freePort(t)
	addr := startMosquittoConf(t, port, fmt.Sprintf("listener %d 127.0.0.1\nallow_anonymous false\n", port))
	cfg := testConfig(addr, ModeConn)
	cfg.Levels = []int{3}
	cfg.Hold = 0
	r, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if l := r.Levels[0]; l.Reasons[failRejected] != 3 || r.OK() {
		t.Fatalf("level %+v, want 3 rejected by CONNACK", l)
	}
}

func TestValidateLoopback(t *testing.T) {
	tests := []struct {
		addr   string
		remote bool
		want   error
	}{
		{"127.0.0.1:1883", false, nil},
		{"[::1]:1883", false, nil},
		{"localhost:1883", false, nil},
		{":1883", false, nil},
		{"192.0.2.10:1883", false, ErrRemoteTarget},
		{"[2001:db8::1]:1883", false, ErrRemoteTarget},
		{"192.0.2.10:1883", true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			cfg := Defaults()
			cfg.Addr, cfg.AllowRemote = tt.addr, tt.remote
			err := cfg.Validate(context.Background())
			if !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
				t.Fatalf("Validate(%s, remote=%v) = %v, want %v", tt.addr, tt.remote, err, tt.want)
			}
		})
	}
	// Run refuses before dialling anything.
	cfg := Defaults()
	cfg.Addr = "192.0.2.10:1883"
	if _, err := Run(context.Background(), cfg, nil); !errors.Is(err, ErrRemoteTarget) {
		t.Fatalf("Run to a remote target: %v", err)
	}
}

func TestValidateBounds(t *testing.T) {
	tests := []struct {
		name string
		set  func(*Config)
		want string
	}{
		{"mode", func(c *Config) { c.Mode = "flood" }, "-mode"},
		{"levels order", func(c *Config) { c.Mode, c.Levels = ModeConn, []int{10, 5} }, "-levels"},
		{"levels cap", func(c *Config) { c.Mode, c.Levels = ModeConn, []int{MaxConnections + 1} }, "-levels"},
		{"payload below stamp", func(c *Config) { c.Payload = 8 }, "-payload"},
		{"no duration", func(c *Config) { c.Duration = 0 }, "-duration"},
		{"too long", func(c *Config) { c.Duration = 2 * time.Hour }, "-duration"},
		{"qos", func(c *Config) { c.QoS = 3 }, "-qos"},
		{"pubsub without subs", func(c *Config) { c.Mode, c.Subs = ModePubSub, 0 }, "-subs"},
		{"clients cap", func(c *Config) { c.Pubs = MaxClients }, "-pubs + -subs"},
		{"wildcard prefix", func(c *Config) { c.TopicPrefix = "a/#" }, "-topic-prefix"},
		{"inflight", func(c *Config) { c.Inflight = 0 }, "-inflight"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Defaults()
			tt.set(&cfg)
			err := cfg.Validate(context.Background())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want an error about %s", err, tt.want)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	_, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", freePort(t)), time.Second)
	tests := []struct {
		err  error
		want string
	}{
		{err, failRefused},
		{&rejectError{code: 0x87}, failRejected},
		{fmt.Errorf("waiting: %w", context.DeadlineExceeded), failTimeout},
		{errDisconnected, failReset},
		{errors.New("odd"), failOther},
	}
	for _, tt := range tests {
		if got := classify(tt.err); got != tt.want {
			t.Errorf("classify(%v) = %s, want %s", tt.err, got, tt.want)
		}
	}
}

// TestReceiveMaximumCapsWindow checks that an MQTT 5 server's Receive
// Maximum bounds the QoS 1 window even when -inflight asks for more.
func TestReceiveMaximumCapsWindow(t *testing.T) {
	addr := startMosquitto(t, "max_inflight_messages 7")
	tests := []struct {
		name string
		v5   bool
		want int
	}{
		{"mqtt5 capped by the server", true, 7},
		{"mqtt3 uses -inflight", false, 50},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(addr, ModePub)
			cfg.QoS, cfg.Pubs, cfg.Count, cfg.Inflight, cfg.V5 = 1, 1, 200, 50, tt.v5
			r := runOK(t, cfg)
			if r.Inflight != tt.want || r.Acked != 200 {
				t.Fatalf("inflight %d acked %d, want %d and 200", r.Inflight, r.Acked, tt.want)
			}
		})
	}
}

// TestSourceAddrs: dials bind to the configured local addresses in turn,
// as the listener sees them, so several 127.0.0.x hold more connections
// than one address's ephemeral ports allow.
func TestSourceAddrs(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := testConfig(ln.Addr().String(), ModeConn)
	cfg.SourceAddrs = []netip.Addr{netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.3")}
	if err := cfg.Validate(context.Background()); err != nil {
		t.Fatal(err)
	}
	d, err := newDialer(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 4 {
		c, err := d.dial(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		sc, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer sc.Close()
		got = append(got, sc.RemoteAddr().(*net.TCPAddr).IP.String())
	}
	want := []string{"127.0.0.2", "127.0.0.3", "127.0.0.2", "127.0.0.3"}
	if !slices.Equal(got, want) {
		t.Fatalf("connections came from %v, want %v", got, want)
	}
	cfg.SourceAddrs = []netip.Addr{netip.MustParseAddr("192.0.2.1")}
	if err := cfg.Validate(context.Background()); err == nil {
		t.Fatal("a non-loopback source address passed validation")
	}
}
