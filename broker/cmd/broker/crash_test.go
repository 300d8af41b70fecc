package main

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"berth.dev/broker/packet"
)

// crashChildEnv makes the test binary run the broker (see TestMain): the
// crash loop kills it with SIGKILL, which it cannot do to itself.
const crashChildEnv = "BERTH_CRASH_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) != "" {
		ready := func(tcp, _ net.Addr) { fmt.Printf("ADDR %s\n", tcp) }
		ctx, stop := context.WithCancel(context.Background())
		defer stop()
		if err := run(ctx, os.Args[1:], func(string) string { return "" }, ready); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// startChild runs the broker in a child process on dataDir with -fsync
// always and returns it and its MQTT address.
func startChild(t *testing.T, dataDir string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-listen", "127.0.0.1:0", "-allow-anonymous", "-data", dataDir,
		"-fsync", "always", "-log-level", "warn", "-sys-interval", "-1s")
	cmd.Env = append(os.Environ(), crashChildEnv+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("child address: %v", err)
	}
	return cmd, strings.TrimSpace(strings.TrimPrefix(line, "ADDR "))
}

// mqttClient is a minimal MQTT 5 client over the codec.
type mqttClient struct {
	nc  net.Conn
	rd  *packet.Reader
	wmu sync.Mutex
}

func dialMQTT(addr, clientID string, expiry uint32) (*mqttClient, error) {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	c := &mqttClient{nc: nc, rd: packet.NewReader(nc, 4096)}
	cp := &packet.Connect{ClientID: []byte(clientID), CleanStart: false}
	cp.Props.Has.Set(packet.PropSessionExpiry)
	cp.Props.SessionExpiry = expiry
	if err := c.send(cp); err != nil {
		nc.Close()
		return nil, err
	}
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	fh, _, err := c.rd.ReadPacket(0)
	if err != nil || fh.Type != packet.TypeConnack {
		nc.Close()
		return nil, fmt.Errorf("CONNACK: %v %v", fh.Type, err)
	}
	_ = nc.SetReadDeadline(time.Time{})
	return c, nil
}

func (c *mqttClient) send(p interface {
	Append([]byte, byte) ([]byte, error)
}) error {
	b, err := p.Append(nil, packet.Version5)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err = c.nc.Write(b)
	return err
}

// crashLog is what the crash loop observed.
type crashLog struct {
	mu       sync.Mutex
	acked    []int         // sequence numbers PUBACKed, in ack order
	received []int         // sequence numbers the subscriber got, duplicates included
	killAt   int           // len(acked) at which to crash the broker
	kill     chan struct{} // closed when killAt is reached
}

// subscribeLoop receives and acknowledges messages until the connection
// breaks.
func (l *crashLog) subscribeLoop(c *mqttClient) {
	for {
		fh, body, err := c.rd.ReadPacket(0)
		if err != nil {
			return
		}
		if fh.Type != packet.TypePublish {
			continue
		}
		var p packet.Publish
		if p.Decode(packet.Version5, fh, body) != nil {
			return
		}
		seq, _ := strconv.Atoi(string(p.Payload))
		l.mu.Lock()
		l.received = append(l.received, seq)
		l.mu.Unlock()
		if p.QoS > 0 {
			_ = c.send(&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID})
		}
	}
}

// publishLoop publishes QoS 1 messages numbered from next with up to 16
// unacknowledged, recording every PUBACK, until the connection breaks. It
// returns the next unused number.
func (l *crashLog) publishLoop(c *mqttClient, next int) int {
	window := make(chan struct{}, 16)
	var mu sync.Mutex
	byID := map[uint16]int{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			fh, body, err := c.rd.ReadPacket(0)
			if err != nil {
				return
			}
			var a packet.Ack
			if fh.Type != packet.TypePuback || a.Decode(packet.Version5, fh, body) != nil {
				continue
			}
			mu.Lock()
			seq, ok := byID[a.PacketID]
			delete(byID, a.PacketID)
			mu.Unlock()
			if ok {
				l.mu.Lock()
				l.acked = append(l.acked, seq)
				if len(l.acked) == l.killAt {
					close(l.kill)
				}
				l.mu.Unlock()
			}
			<-window
		}
	}()
	for {
		select {
		case window <- struct{}{}:
		case <-done:
			return next
		}
		id := uint16(next%60000 + 1)
		mu.Lock()
		byID[id] = next
		mu.Unlock()
		if err := c.send(&packet.Publish{QoS: 1, PacketID: id, Topic: []byte("crash/t"), Payload: []byte(strconv.Itoa(next))}); err != nil {
			<-done
			return next + 1
		}
		next++
	}
}

// TestCrashLoop kills a child broker (-fsync always) with SIGKILL at random
// points while a client publishes QoS 1; after each restart the persistent
// subscriber gets every PUBACKed message, in order (first deliveries in
// publish order; redeliveries of QoS 1 are allowed).
func TestCrashLoop(t *testing.T) {
	const iterations = 5
	dataDir := t.TempDir()
	var l crashLog
	next := 1
	for iter := range iterations {
		cmd, addr := startChild(t, dataDir)
		sub, err := dialMQTT(addr, "durable-sub", 3600)
		if err != nil {
			t.Fatal(err)
		}
		if iter == 0 {
			if err := sub.send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: []byte("crash/#"), QoS: 1}}}); err != nil {
				t.Fatal(err)
			}
			_ = sub.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
			if fh, _, err := sub.rd.ReadPacket(0); err != nil || fh.Type != packet.TypeSuback {
				t.Fatalf("SUBACK: %v %v", fh.Type, err)
			}
			_ = sub.nc.SetReadDeadline(time.Time{})
		}
		subDone := make(chan struct{})
		go func() { defer close(subDone); l.subscribeLoop(sub) }()
		pub, err := dialMQTT(addr, fmt.Sprintf("pub-%d", iter), 0)
		if err != nil {
			t.Fatal(err)
		}
		// The random crash point: after 50 to 800 more acknowledgements.
		l.mu.Lock()
		l.killAt = len(l.acked) + 50 + rand.IntN(750)
		l.kill = make(chan struct{})
		kill := l.kill
		l.mu.Unlock()
		pubDone := make(chan int)
		go func() { pubDone <- l.publishLoop(pub, next) }()
		select {
		case <-kill:
		case <-time.After(10 * time.Second):
			t.Fatal("publishing stalled")
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		next = <-pubDone
		<-subDone
		pub.nc.Close()
		sub.nc.Close()
		l.mu.Lock()
		t.Logf("iteration %d: %d acked, %d received so far", iter, len(l.acked), len(l.received))
		l.mu.Unlock()
	}

	// A last restart: everything acknowledged must arrive.
	_, addr := startChild(t, dataDir)
	sub, err := dialMQTT(addr, "durable-sub", 3600)
	if err != nil {
		t.Fatal(err)
	}
	go l.subscribeLoop(sub)
	defer sub.nc.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		missing := l.missing()
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d acknowledged messages never arrived, first %v", len(missing), missing[:min(10, len(missing))])
		}
		time.Sleep(20 * time.Millisecond)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.acked) < iterations {
		t.Fatalf("only %d messages acknowledged in %d iterations", len(l.acked), iterations)
	}
	seen := map[int]bool{}
	last := 0
	for _, seq := range l.received {
		if seen[seq] {
			continue // a QoS 1 redelivery
		}
		seen[seq] = true
		if seq < last {
			t.Fatalf("out of order: %d first delivered after %d", seq, last)
		}
		last = seq
	}
	t.Logf("%d acknowledged, %d delivered (%d distinct) across %d SIGKILLs", len(l.acked), len(l.received), len(seen), iterations)
}

// missing returns the acknowledged sequence numbers not received yet.
func (l *crashLog) missing() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	got := make(map[int]bool, len(l.received))
	for _, s := range l.received {
		got[s] = true
	}
	var out []int
	for _, s := range l.acked {
		if !got[s] {
			out = append(out, s)
		}
	}
	return out
}
