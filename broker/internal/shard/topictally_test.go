package shard

import (
	"testing"

	"berth.dev/broker/packet"
)

// TestTopicCountedOncePerBurst: a publisher's burst to one topic is
// counted in the admin view's per-topic counters exactly (messages and
// bytes), with the topic looked up in its stripe once, not once per
// message (topictally.go). The PUBACK of the last, QoS 1 message comes
// after the counts are in: the tally is flushed before it is queued.
func TestTopicCountedOncePerBurst(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	pub := v5Client(t, b, "tally-pub")
	const n = 300
	payload := []byte("0123456789abcdef")
	var burst []byte
	for i := range n {
		p := &packet.Publish{Topic: []byte("tally/a"), Payload: payload}
		if i == n-1 {
			p.QoS, p.PacketID = 1, 1
		}
		var err error
		if burst, err = p.Append(burst, packet.Version5); err != nil {
			t.Fatal(err)
		}
	}
	pub.sendBytes(burst)
	pub.read(packet.TypePuback)

	var got TopicInfo
	for _, ti := range b.shard.Topics() {
		if ti.Topic == "tally/a" {
			got = ti
		}
	}
	if got.Messages != n || got.Bytes != n*uint64(len(payload)) {
		t.Fatalf("tally/a: %d messages, %d bytes; want %d, %d", got.Messages, got.Bytes, n, n*len(payload))
	}
	lookups := 0
	for i := range b.shard.topics.stripes {
		st := &b.shard.topics.stripes[i]
		st.mu.Lock()
		lookups += st.lookups
		st.mu.Unlock()
	}
	t.Logf("%d messages, %d stripe lookups", n, lookups)
	if lookups > 4 {
		t.Fatalf("%d stripe lookups for %d messages to one topic, want a few", lookups, n)
	}
}

// TestTopicTallyFlushes: a tally adds to the counters when the topic or
// the second changes, with the reader's last buffered packet, after
// outboxPackets messages and when flushed, and counts a topic too long
// to keep a copy of at once.
func TestTopicTallyFlushes(t *testing.T) {
	var ts topicStats
	var tl topicTally
	count := func(name string) (uint64, uint64) {
		st := ts.stat([]byte(name))
		return st.msgs.Load(), st.bytes.Load()
	}
	ts.tally(&tl, []byte("a"), 10, 100, false)
	ts.tally(&tl, []byte("a"), 10, 100, false)
	if m, _ := count("a"); m != 0 {
		t.Fatalf("counted %d before a flush", m)
	}
	ts.tally(&tl, []byte("a"), 5, 101, false) // a new second: second 100's two go in
	if m, by := count("a"); m != 2 || by != 20 {
		t.Fatalf("a after the second changed: %d, %d; want 2, 20", m, by)
	}
	ts.tally(&tl, []byte("b"), 7, 101, false) // another topic: a's third goes in
	if m, by := count("a"); m != 3 || by != 25 {
		t.Fatalf("a after the topic changed: %d, %d; want 3, 25", m, by)
	}
	tl.flush()
	if m, by := count("b"); m != 1 || by != 7 {
		t.Fatalf("b after the flush: %d, %d; want 1, 7", m, by)
	}
	if mps, _ := ts.stat([]byte("a")).window.rates(101); mps != 0.3 {
		t.Fatalf("a's rate %v, want 0.3", mps)
	}
	long := make([]byte, maxTalliedTopic+1)
	ts.tally(&tl, long, 1, 101, false)
	if m, _ := count(string(long)); m != 1 {
		t.Fatalf("a long topic counted %d at once, want 1", m)
	}
	ts.tally(&tl, []byte("c"), 3, 101, true) // the last buffered: counted at once
	if m, by := count("c"); m != 1 || by != 3 {
		t.Fatalf("c, last: %d, %d; want 1, 3", m, by)
	}
	for range outboxPackets {
		ts.tally(&tl, []byte("c"), 1, 101, false)
	}
	if m, _ := count("c"); m != 1+outboxPackets {
		t.Fatalf("c after %d more not last: %d counted, want all", outboxPackets, m)
	}
	if n := testing.AllocsPerRun(100, func() { ts.tally(&tl, []byte("b"), 1, 101, false) }); n != 0 {
		t.Errorf("tally allocates %v times", n)
	}
}
