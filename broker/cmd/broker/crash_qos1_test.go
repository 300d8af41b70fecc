package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"berth.dev/broker/packet"
)

var (
	crashCycles     = flag.Int("crash-cycles", 4, "SIGKILL cycles of each TestCrashLoop case (make crash-qos1: 20)")
	crashPublishers = flag.Int("crash-publishers", 4, "pipelined QoS 1 publishers of TestCrashLoop")
	crashMost       = flag.Int("crash-most", 800, "most messages TestCrashLoop acknowledges between two SIGKILLs (make crash-qos1: 20000)")
)

// crashWindow is each publisher's pipeline: PUBLISHes sent before their
// PUBACK.
const crashWindow = 16

// pubStride separates the publishers' sequence numbers: publisher p sends
// p*pubStride+1, p*pubStride+2, ...
const pubStride = 1_000_000_000

// crashLog is what the crash loop observed.
type crashLog struct {
	mu       sync.Mutex
	acked    []int         // sequence numbers PUBACKed, in ack order
	received []int         // sequence numbers the subscriber got, duplicates included
	got      map[int]bool  // distinct received
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
		l.got[seq] = true
		l.mu.Unlock()
		if p.QoS > 0 {
			_ = c.send(&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID})
		}
	}
}

// publishLoop publishes QoS 1 messages numbered from next with up to
// crashWindow unacknowledged, recording every successful PUBACK, until the
// connection breaks. It returns the next unused number. A PUBACK with a
// failure reason fails the test: nothing here should be refused.
func (l *crashLog) publishLoop(t *testing.T, c *mqttClient, next int) int {
	window := make(chan struct{}, crashWindow)
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
			if ok && a.Reason >= 0x80 {
				t.Errorf("message %d refused: PUBACK 0x%02x", seq, a.Reason)
			} else if ok {
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

// missingOf returns how many of the first n acknowledged sequence numbers
// were not received yet, and the first few of them.
func (l *crashLog) missingOf(n int) (int, []int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	count := 0
	var first []int
	for _, s := range l.acked[:n] {
		if !l.got[s] {
			count++
			if len(first) < 10 {
				first = append(first, s)
			}
		}
	}
	return count, first
}

// counts returns acknowledged, received and duplicate deliveries so far.
func (l *crashLog) counts() (acked, received, dups int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked), len(l.received), len(l.received) - len(l.got)
}

// TestCrashLoop kills a child broker with SIGKILL at random points while
// crashPublishers clients publish QoS 1 with crashWindow PUBLISHes each in
// flight. After each restart the persistent subscriber must get every
// message PUBACKed before the kill (checked per cycle, with the time from
// SIGKILL to having them all as the recovery time), and first deliveries
// must keep each publisher's order (QoS 1 redeliveries are allowed). It
// runs with the broker's default flags plus -data (fsync interval), the
// issue's "done when", and with -fsync always.
func TestCrashLoop(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags []string
	}{
		{"default-flags", nil},
		{"fsync-always", []string{"-fsync", "always"}},
	} {
		t.Run(tc.name, func(t *testing.T) { crashLoopQoS1(t, tc.flags) })
	}
}

func crashLoopQoS1(t *testing.T, flags []string) {
	cycles, pubs := *crashCycles, *crashPublishers
	dataDir := t.TempDir()
	l := crashLog{got: map[int]bool{}}
	next := make([]int, pubs)
	for p := range next {
		next[p] = p*pubStride + 1
	}
	start := time.Now()
	var killedAt time.Time
	var recoveries []time.Duration
	for cycle := range cycles + 1 {
		cmd, addr := startChildWith(t, dataDir, flags...)
		sub, err := dialMQTT(addr, "durable-sub", 3600)
		if err != nil {
			t.Fatal(err)
		}
		if cycle == 0 {
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

		if cycle > 0 {
			// Everything acknowledged before the kill must arrive.
			before, _, _ := l.counts()
			deadline := time.Now().Add(30 * time.Second)
			for {
				n, first := l.missingOf(before)
				if n == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("cycle %d: %d of %d acknowledged messages never arrived after the restart, first %v", cycle, n, before, first)
				}
				time.Sleep(5 * time.Millisecond)
			}
			recoveries = append(recoveries, time.Since(killedAt))
			acked, received, dups := l.counts()
			t.Logf("cycle %d: %d acked, %d received, 0 lost, %d duplicates so far; recovered in %v",
				cycle, acked, received, dups, recoveries[len(recoveries)-1].Round(time.Millisecond))
		}
		if cycle == cycles {
			sub.nc.Close()
			<-subDone
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			break
		}

		// The random crash point: after 50 to crashMost more acknowledgements.
		l.mu.Lock()
		l.killAt = len(l.acked) + 50 + rand.IntN(max(*crashMost-50, 1))
		l.kill = make(chan struct{})
		kill := l.kill
		l.mu.Unlock()
		conns := make([]*mqttClient, pubs)
		var wg sync.WaitGroup
		for p := range pubs {
			c, err := dialMQTT(addr, fmt.Sprintf("pub-%d-%d", cycle, p), 0)
			if err != nil {
				t.Fatal(err)
			}
			conns[p] = c
			wg.Add(1)
			go func() { defer wg.Done(); next[p] = l.publishLoop(t, c, next[p]) }()
		}
		select {
		case <-kill:
		case <-time.After(60 * time.Second):
			t.Fatalf("cycle %d: publishing stalled", cycle)
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		killedAt = time.Now()
		_ = cmd.Wait()
		wg.Wait()
		<-subDone
		for _, c := range conns {
			c.nc.Close()
		}
		sub.nc.Close()
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.acked) < cycles*50 {
		t.Fatalf("only %d messages acknowledged in %d cycles", len(l.acked), cycles)
	}
	last := map[int]int{} // publisher -> last first-delivered sequence number
	seen := map[int]bool{}
	for _, seq := range l.received {
		if seen[seq] {
			continue // a QoS 1 redelivery
		}
		seen[seq] = true
		p := seq / pubStride
		if seq < last[p] {
			t.Fatalf("out of order: %d first delivered after %d", seq, last[p])
		}
		last[p] = seq
	}
	slowest := time.Duration(0)
	for _, r := range recoveries {
		slowest = max(slowest, r)
	}
	t.Logf("CRASH QoS 1 %v: %d SIGKILLs, %d publishers x %d in flight, %v: %d acked, 0 lost, %d delivered (%d duplicates); recovery (kill to all acked delivered) max %v, all %v",
		flags, cycles, pubs, crashWindow, time.Since(start).Round(time.Millisecond), len(l.acked), len(l.received),
		len(l.received)-len(l.got), slowest.Round(time.Millisecond), roundDurations(recoveries))
}

func roundDurations(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}
