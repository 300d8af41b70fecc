package shard

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"berth.dev/broker/internal/topic"
	"berth.dev/broker/packet"
)

// TestSlabAllocations pins the inbound path, from a decoded PUBLISH to one
// delivery queued in each of 100 sessions, at three allocations per read
// of 40 packets: messages and their bytes come out of shared chunks.
func TestSlabAllocations(t *testing.T) {
	s := offlineFanout(t, 100)
	for _, sess := range s.sessions { // connected, as their writers keep up
		sess.conn = stubConn()
	}
	p := packet.Publish{QoS: 1, Topic: []byte("bench/x"), Payload: make([]byte, 64), PacketID: 7}
	var sl slab
	var mt topic.Matches
	const perRun = 320
	run := func() {
		for i := range perRun {
			// Packets arrive 40 to a read, as from a publisher sending
			// back to back.
			more := (39 - i%40) * 80
			m := sl.newMessage(&p, p.Topic, time.Now(), noPublisher, more)
			s.publish(m, &mt)
			drain(s)
			if more == 0 {
				sl.release()
			}
		}
	}
	run() // grow the buffers
	allocs := testing.AllocsPerRun(20, run)
	t.Logf("%d messages routed to 100 sessions: %v allocations", perRun, allocs)
	if allocs > 3*perRun/40 { // per read: two chunks of messages, one of bytes
		t.Fatalf("%d messages allocate %v times", perRun, allocs)
	}
}

// TestSlabMessageMatchesHeapMessage checks that a slab message, and its
// owned copy, carry exactly what newMessage copies, and encode alike.
func TestSlabMessageMatchesHeapMessage(t *testing.T) {
	p := packet.Publish{QoS: 1, Retain: true, Topic: []byte("a/b"), Payload: []byte("payload")}
	p.Props.Has = packet.Mask(packet.PropContentType) | packet.Mask(packet.PropMessageExpiry) |
		packet.Mask(packet.PropCorrelationData) | packet.Mask(packet.PropUserProperty) | packet.Mask(packet.PropTopicAlias)
	p.Props.ContentType = []byte("text/plain")
	p.Props.MessageExpiry = 60
	p.Props.CorrelationData = []byte{1, 2, 3}
	p.Props.TopicAlias = 4
	p.Props.UserProperties = []packet.UserProperty{{Key: []byte("k1"), Value: []byte("v1")}, {Key: []byte("k2"), Value: []byte("v2")}}
	now := time.Now()
	var sl slab
	heap := newMessage(&p, p.Topic, now, 3)
	slabbed := sl.newMessage(&p, p.Topic, now, 3, 1000)
	// The packet's buffer is reused for the next packet: nothing may alias it.
	p.Payload[0] = 'X'
	p.Props.UserProperties[0].Key[0] = 'X'
	if slabbed.chunk == nil || heap.chunk != nil {
		t.Fatal("slabbed flags wrong")
	}
	owned := slabbed.own()
	if owned.chunk != nil || owned == slabbed || slabbed.own() != owned || heap.own() != heap {
		t.Fatal("own must copy a slab message once and return others as they are")
	}
	for name, m := range map[string]*message{"slab": slabbed, "owned": owned} {
		for _, v := range []byte{packet.Version311, packet.Version5} {
			for qos := byte(0); qos <= 1; qos++ {
				want, err := heap.header(v, qos)
				if err != nil {
					t.Fatal(err)
				}
				got, err := m.header(v, qos)
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("%s header v%d qos%d = %x, %v; want %x", name, v, qos, got, err, want)
				}
			}
		}
		if string(m.payload) != "payload" || m.expireAt != heap.expireAt || m.size != heap.size ||
			m.publisher != 3 || !m.retain || string(m.props.UserProperties[0].Key) != "k1" {
			t.Fatalf("%s message differs: %+v", name, m)
		}
	}
	// Headers built by different messages never overwrite each other's
	// bytes in the shared chunk.
	next := sl.newMessage(&packet.Publish{Topic: []byte("c"), Payload: []byte("zz")}, []byte("c"), now, 3, 0)
	if next.chunk != slabbed.chunk {
		t.Fatal("two packets read together do not share a chunk")
	}
	if _, err := next.header(packet.Version5, 0); err != nil {
		t.Fatal(err)
	}
	if string(slabbed.payload) != "payload" || string(slabbed.topic) != "a/b" {
		t.Fatal("a later message overwrote an earlier one")
	}
}

// TestSlabLargeMessageOwnsItsBuffer: a message bigger than a quarter
// chunk is never packed with others.
func TestSlabLargeMessageOwnsItsBuffer(t *testing.T) {
	var sl slab
	big := sl.newMessage(&packet.Publish{Topic: []byte("t"), Payload: make([]byte, slabMaxCopy)}, []byte("t"), time.Now(), 1, 1<<20)
	if big.chunk != nil || big.own() != big {
		t.Fatal("a big message was carved out of the slab")
	}
}

// TestSlabChunksFollowTheInput: a lone packet gets a chunk of its own
// size, packets buffered together share one, and release lets it go.
func TestSlabChunksFollowTheInput(t *testing.T) {
	var sl slab
	p := packet.Publish{Topic: []byte("t"), Payload: make([]byte, 10)}
	lone := sl.newMessage(&p, p.Topic, time.Now(), 1, 0)
	if len(sl.msgs) != 0 || cap(sl.bytes) != len(sl.bytes) {
		t.Fatalf("a lone packet left room for %d messages, %d bytes", len(sl.msgs), cap(sl.bytes)-len(sl.bytes))
	}
	first := sl.newMessage(&p, p.Topic, time.Now(), 1, 1<<20)
	if first.chunk == lone.chunk || len(sl.msgs) != slabMessages-1 {
		t.Fatalf("back-to-back packets: chunk of %d", len(sl.msgs)+1)
	}
	sl.release()
	if sl.msgs != nil || sl.bytes != nil || sl.extra != nil && (sl.extra.props != nil || sl.extra.hdrs != nil) {
		t.Fatal("release kept a chunk")
	}
}

// TestSlabMessagesKeptLongAreOwned: what keeps a message beyond its
// delivery (retained store, offline session queues and inflight windows,
// a writer fallen behind) holds owned copies, so one message cannot pin
// a chunk of others.
func TestSlabMessagesKeptLongAreOwned(t *testing.T) {
	s := New(Options{SysInterval: -1, MaxQueuedMessages: 1000})
	var mt topic.Matches
	publish := func(sl *slab, topicName string, retain bool) *message {
		p := packet.Publish{QoS: 1, Retain: retain, Topic: []byte(topicName), Payload: []byte("x")}
		m := sl.newMessage(&p, p.Topic, time.Now(), noPublisher, 1<<20)
		s.publish(m, &mt)
		return m
	}
	var a slab

	m := publish(&a, "r/1", true)
	got, ok := s.retained.Get("r/1")
	if !ok || got.chunk != nil || got.off != 0 || got == m.own() {
		t.Fatalf("retained store holds %+v", got)
	}

	s.mu.Lock()
	offline := s.newSessionLocked("offline")
	offline.expiry = neverExpires
	online := s.newSessionLocked("online")
	online.conn = stubConn()
	for _, sess := range []*session{offline, online} {
		if _, err := s.tree.Subscribe(sess.id, "q/#", topic.Options{QoS: 1}); err != nil {
			t.Fatal(err)
		}
	}
	s.mu.Unlock()

	// One publisher's messages come in few chunks: the connected session
	// keeps them all as they are.
	const n = 3 * slabMessages
	for i := range n {
		publish(&a, fmt.Sprintf("q/%d", i), false)
	}
	// Publishers whose chunks send this queue one message each (the rest
	// would go elsewhere): past pinnedRunsMax such chunks the connected
	// session gets owned copies.
	for i := range 2 * pinnedRunsMax {
		var sparse slab
		publish(&sparse, fmt.Sprintf("q/x/%d", i), false)
	}
	online.mu.Lock()
	defer online.mu.Unlock()
	offline.mu.Lock()
	defer offline.mu.Unlock()
	total := n + 2*pinnedRunsMax
	if offline.queue.len() != total || online.queue.len() != total {
		t.Fatalf("queued %d and %d", offline.queue.len(), online.queue.len())
	}
	owned := 0
	chunks := map[*message]bool{}
	for i := range total {
		if offline.queue.at(i).msg.chunk != nil {
			t.Fatalf("offline delivery %d holds a slab message", i)
		}
		if ch := online.queue.at(i).msg.chunk; ch != nil {
			chunks[ch] = true
		} else {
			owned++
			if i < n {
				t.Fatalf("online delivery %d of one publisher's run was copied", i)
			}
		}
	}
	if len(chunks) > pinnedRunsMax+recentChunks || owned == 0 {
		t.Fatalf("the queue holds %d chunks, %d owned copies", len(chunks), owned)
	}

	// Going offline: the queue and the inflight window are made owned.
	online.putInflightLocked(1, &delivery{msg: online.queue.at(0).msg, qos: 1, id: 1, state: statePublish})
	online.ownMessagesLocked()
	for i := range online.queue.len() {
		if online.queue.at(i).msg.chunk != nil {
			t.Fatalf("delivery %d still slabbed after going offline", i)
		}
	}
	if online.inflight[1].msg.chunk != nil {
		t.Fatal("inflight message still slabbed after going offline")
	}
}

// stubConn is a connected session's connection for routing tests: wakes
// are absorbed, no writer goroutine starts.
func stubConn() *conn {
	c := &conn{}
	c.wakeChan()
	c.writing.Store(true)
	return c
}

// TestSlabInterleavedPublishersKeepTheirChunks: ten publishers sending
// back to back into one slow subscriber (the fan-in of make bench's QoS 0
// ingest) interleave their chunks in its queue. Each chunk's messages
// all wait there, so copying them would only double the work: the queue
// keeps the chunks, counted about once each, however deep it grows.
func TestSlabInterleavedPublishersKeepTheirChunks(t *testing.T) {
	s := New(Options{SysInterval: -1, MaxQueuedMessages: 100_000})
	var mt topic.Matches
	s.mu.Lock()
	sub := s.newSessionLocked("sub")
	sub.conn = stubConn()
	if _, err := s.tree.Subscribe(sub.id, "in/#", topic.Options{QoS: 0}); err != nil {
		t.Fatal(err)
	}
	s.mu.Unlock()

	const pubs, perPub = 10, 20 * slabMessages
	slabs := make([]slab, pubs)
	for i := range perPub {
		for j := range slabs {
			p := packet.Publish{Topic: []byte("in/t"), Payload: []byte("0123456789abcdef")}
			m := slabs[j].newMessage(&p, p.Topic, time.Now(), noPublisher, 1<<20)
			if s.publish(m, &mt) != 1 {
				t.Fatalf("message %d of publisher %d reached no one", i, j)
			}
		}
	}
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if sub.queue.len() != pubs*perPub {
		t.Fatalf("queued %d, want %d", sub.queue.len(), pubs*perPub)
	}
	chunks := map[*message]bool{}
	for i := range sub.queue.len() {
		ch := sub.queue.at(i).msg.chunk
		if ch == nil {
			t.Fatalf("delivery %d is an owned copy: a dense chunk was copied", i)
		}
		chunks[ch] = true
	}
	if want := pubs * perPub / slabMessages; len(chunks) != want || int(sub.queue.runs) != want {
		t.Errorf("%d chunks, %d runs counted; want %d of each", len(chunks), sub.queue.runs, want)
	}
	for sub.queue.len() > 0 {
		sub.queue.pop()
	}
	if sub.queue.runs != 0 || sub.queue.slots != 0 {
		t.Errorf("drained queue counts %d runs, %d slots", sub.queue.runs, sub.queue.slots)
	}
}
