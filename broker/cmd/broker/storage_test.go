package main

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"berth.dev/broker/packet"
)

// TestFsyncFlags: -fsync takes always, interval (the default) or never,
// and -fsync-interval must be positive.
func TestFsyncFlags(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		env      map[string]string
		want     string
		interval time.Duration
		wantErr  bool
	}{
		{name: "default", want: "interval", interval: 100 * time.Millisecond},
		{name: "always", args: []string{"-fsync", "always"}, want: "always", interval: 100 * time.Millisecond},
		{name: "env", env: map[string]string{"BERTH_FSYNC": "never", "BERTH_FSYNC_INTERVAL": "1s"}, want: "never", interval: time.Second},
		{name: "unknown policy", args: []string{"-fsync", "sometimes"}, wantErr: true},
		{name: "zero interval", args: []string{"-fsync-interval", "0s"}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parseConfig(tc.args, func(k string) string { return tc.env[k] }, io.Discard)
			if tc.wantErr {
				if err == nil {
					t.Fatal("no error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Fsync != tc.want || cfg.FsyncInterval != tc.interval {
				t.Fatalf("fsync %q every %v, want %q every %v", cfg.Fsync, cfg.FsyncInterval, tc.want, tc.interval)
			}
		})
	}
}

// runBroker runs the standalone broker in-process on dataDir until the
// test stops it; it returns the address and a stop function that waits.
func runBroker(t *testing.T, dataDir string) (string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-listen", "127.0.0.1:0", "-allow-anonymous", "-data", dataDir, "-log-level", "warn", "-sys-interval", "-1s"},
			func(string) string { return "" }, func(tcp, _ net.Addr) { ready <- tcp })
	}()
	var addr net.Addr
	select {
	case addr = <-ready:
	case err := <-done:
		cancel()
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}
	t.Cleanup(stop)
	return addr.String(), stop
}

// readPublish reads packets until a PUBLISH, acknowledging it.
func readPublish(t *testing.T, c *mqttClient) *packet.Publish {
	t.Helper()
	_ = c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		fh, body, err := c.rd.ReadPacket(0)
		if err != nil {
			t.Fatalf("reading PUBLISH: %v", err)
		}
		if fh.Type != packet.TypePublish {
			continue
		}
		p := new(packet.Publish)
		if err := p.Decode(packet.Version5, fh, append([]byte(nil), body...)); err != nil {
			t.Fatal(err)
		}
		if p.QoS > 0 {
			_ = c.send(&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID})
		}
		return p
	}
}

// TestStandaloneKeepsStateAcrossRestart: with -data, a persistent
// session, the messages queued for it while offline and a retained
// message survive a restart of the broker.
func TestStandaloneKeepsStateAcrossRestart(t *testing.T) {
	dataDir := t.TempDir()
	addr, stop := runBroker(t, dataDir)
	sub, err := dialMQTT(addr, "keeper", 3600)
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: []byte("k/#"), QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	_ = sub.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if fh, _, err := sub.rd.ReadPacket(0); err != nil || fh.Type != packet.TypeSuback {
		t.Fatalf("SUBACK: %v %v", fh.Type, err)
	}
	_ = sub.send(&packet.Disconnect{})
	sub.nc.Close()

	pub, err := dialMQTT(addr, "pub", 0)
	if err != nil {
		t.Fatal(err)
	}
	msgs := []*packet.Publish{
		{QoS: 1, PacketID: 1, Topic: []byte("k/1"), Payload: []byte("one")},
		{QoS: 1, PacketID: 2, Topic: []byte("k/2"), Payload: []byte("two")},
		{QoS: 1, PacketID: 3, Retain: true, Topic: []byte("r/x"), Payload: []byte("retained")},
	}
	for _, m := range msgs {
		if err := pub.send(m); err != nil {
			t.Fatal(err)
		}
		_ = pub.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		if fh, _, err := pub.rd.ReadPacket(0); err != nil || fh.Type != packet.TypePuback {
			t.Fatalf("PUBACK: %v %v", fh.Type, err)
		}
	}
	pub.nc.Close()
	stop()

	addr, _ = runBroker(t, dataDir)
	again, err := dialMQTT(addr, "keeper", 3600)
	if err != nil {
		t.Fatal(err)
	}
	defer again.nc.Close()
	for _, want := range []string{"one", "two"} {
		if p := readPublish(t, again); string(p.Payload) != want {
			t.Fatalf("queued message: got %q, want %q", p.Payload, want)
		}
	}
	if err := again.send(&packet.Subscribe{PacketID: 2, Subscriptions: []packet.Subscription{{Filter: []byte("r/#"), QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	if p := readPublish(t, again); string(p.Payload) != "retained" || !p.Retain {
		t.Fatalf("retained: got %q retain %v", p.Payload, p.Retain)
	}
}
