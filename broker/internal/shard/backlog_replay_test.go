package shard

import (
	"sync"
	"testing"
	"time"

	"berth.dev/broker/internal/wal"
	"berth.dev/broker/packet"
	mqtt "github.com/eclipse/paho.mqtt.golang"
)

// offlineSubscriber creates the persistent session id, subscribed to
// filter at QoS 1, and leaves it offline.
func offlineSubscriber(t *testing.T, b *testBroker, id, filter string) {
	t.Helper()
	c := dialRaw(t, b.addr, packet.Version5)
	if ack := c.connect(sessionConnect(id, 3600, true)); ack.Reason != packet.CodeSuccess {
		t.Fatalf("CONNACK %v", ack.Reason)
	}
	c.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte(filter), QoS: 1})
	_ = c.nc.Close()
	eventually(t, id+" offline", func() bool {
		ss, ok := b.shard.SessionStats(id)
		return ok && !ss.Connected
	})
}

// TestRestartKeepsWholeBacklog: an offline persistent session's backlog
// of 12,000 logged messages (more than MaxQueuedMessages) is rebuilt
// whole from the log after a restart.
func TestRestartKeepsWholeBacklog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st := openWALStore(t, dir, wal.SyncNever)
	sh := newDurableShard(st)
	b := startBrokerWith(t, sh)
	offlineSubscriber(t, b, "keeper", "keep/t")
	const n = 12_000
	for i := range n {
		sh.publishInternal(newSimpleMessage("keep/t", seqPayload(i), 1, false, time.Now()))
	}
	sh2, _ := restart(t, sh, st, dir, wal.SyncNever)
	startBrokerWith(t, sh2) // for its shutdown at the end
	if got := pending(sh2, "keeper"); got != n {
		t.Fatalf("%d messages pending after the restart, want %d", got, n)
	}
	if ss, _ := sh2.SessionStats("keeper"); len(ss.Dropped) != 0 {
		t.Fatalf("drops after the restart: %v", ss.Dropped)
	}
}

// TestBacklogReplayKeepsLiveTrafficFlowing: a persistent session comes
// back to a backlog of 200,000 small QoS 1 messages in the log and gets
// them all, in order, while another client's live QoS 1 stream keeps
// arriving: no gap in it longer than two seconds during the replay (a
// liveness check, loose for a loaded machine running -race). The replay
// rate and the longest gap are logged.
func TestBacklogReplayKeepsLiveTrafficFlowing(t *testing.T) {
	t.Parallel()
	st := openWALStore(t, t.TempDir(), wal.SyncNever)
	sh := newDurableShard(st)
	b := startBrokerWith(t, sh)
	offlineSubscriber(t, b, "replayer", "backlog/t")
	backlog := 200_000
	start := time.Now()
	for i := range backlog {
		sh.publishInternal(newSimpleMessage("backlog/t", seqPayload(i), 1, false, time.Now()))
	}
	if got := pending(sh, "replayer"); got != backlog {
		t.Fatalf("%d pending, want %d", got, backlog)
	}
	t.Logf("backlog of %d logged in %v", backlog, time.Since(start))

	// The live stream: one publisher, one subscriber, 200 messages/s.
	var mu sync.Mutex
	var arrivals []time.Time
	live := paho3(t, b, "live-sub", true)
	wait3(t, live.Subscribe("live/t", 1, func(mqtt.Client, mqtt.Message) {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		mu.Unlock()
	}))
	pub := paho3(t, b, "live-pub", true)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for range 24_000 { // 2 minutes at most
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			pub.Publish("live/t", 1, false, "x").WaitTimeout(5 * time.Second)
		}
	}()
	defer func() { close(stop); <-done }()
	waitFor(t, 10*time.Second, "the live stream", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(arrivals) >= 10
	})

	sub := dialRaw(t, b.addr, packet.Version5)
	replayStart := time.Now()
	if ack := sub.connect(sessionConnect("replayer", 3600, false)); !ack.SessionPresent {
		t.Fatal("session not present")
	}
	var got inOrder
	var acks []byte
	for i := range backlog {
		p := sub.publish()
		got.add(p.Payload)
		acks, _ = (&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID}).Append(acks, packet.Version5)
		if i%256 == 255 || i == backlog-1 {
			sub.sendBytes(acks)
			acks = acks[:0]
		}
	}
	replayEnd := time.Now()
	took := replayEnd.Sub(replayStart)
	if n, disorder, first := got.count(); disorder != 0 {
		t.Fatalf("%d messages, %d out of order (first %d)", n, disorder, first)
	}
	mu.Lock()
	var during int
	maxGap, last := time.Duration(0), replayStart
	for _, at := range arrivals {
		if at.Before(replayStart) || at.After(replayEnd) {
			continue
		}
		during++
		maxGap, last = max(maxGap, at.Sub(last)), at
	}
	maxGap = max(maxGap, replayEnd.Sub(last))
	mu.Unlock()
	t.Logf("replayed %d messages in %v (%.0f msgs/s); %d live messages arrived meanwhile, longest gap %v",
		backlog, took, float64(backlog)/took.Seconds(), during, maxGap)
	if during == 0 || maxGap > 2*time.Second {
		t.Fatalf("live stream stalled during the replay: %d messages, longest gap %v", during, maxGap)
	}
	eventually(t, "the session drained", func() bool {
		ss, _ := sh.SessionStats("replayer")
		return pending(sh, "replayer") == 0 && ss.Inflight == 0
	})
}
