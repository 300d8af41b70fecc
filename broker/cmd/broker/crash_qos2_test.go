package main

import (
	"cmp"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"berth.dev/broker/packet"
)

var (
	qos2CrashCycles = flag.Int("qos2-crash-cycles", 5, "SIGKILL cycles of TestQoS2CrashLoop (make crash-qos2: 20)")
	qos2CrashMost   = flag.Int("qos2-crash-most", 300, "most messages TestQoS2CrashLoop completes between two SIGKILLs (make crash-qos2: 5000, past the broker's 1 s checkpoints)")
)

// q2conn is one MQTT 5 connection of the QoS 2 crash loop's clients.
type q2conn struct {
	nc  net.Conn
	rd  *packet.Reader
	wmu sync.Mutex
}

// dialQoS2 connects with Clean Start 0 (1 when clean) and a session that
// outlives the connection, and reports Session Present.
func dialQoS2(addr, clientID string, clean bool) (*q2conn, bool, error) {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, false, err
	}
	c := &q2conn{nc: nc, rd: packet.NewReader(nc, 4096)}
	cp := &packet.Connect{ClientID: []byte(clientID), CleanStart: clean}
	cp.Props.Has.Set(packet.PropSessionExpiry)
	cp.Props.SessionExpiry = 3600
	if err := c.send(cp); err != nil {
		nc.Close()
		return nil, false, err
	}
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	fh, body, err := c.rd.ReadPacket(0)
	var ack packet.Connack
	if err == nil && fh.Type == packet.TypeConnack {
		err = ack.Decode(packet.Version5, fh, body)
	}
	if err != nil || fh.Type != packet.TypeConnack || ack.Reason != packet.CodeSuccess {
		nc.Close()
		return nil, false, fmt.Errorf("CONNACK: %v %v %v", fh.Type, ack.Reason, err)
	}
	_ = nc.SetReadDeadline(time.Time{})
	return c, ack.SessionPresent, nil
}

func (c *q2conn) send(p interface {
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

// subscribe subscribes to filter at QoS 2 and waits for the SUBACK.
func (c *q2conn) subscribe(filter string) error {
	if err := c.send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: []byte(filter), QoS: 2}}}); err != nil {
		return err
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	defer c.nc.SetReadDeadline(time.Time{})
	fh, _, err := c.rd.ReadPacket(0)
	if err == nil && fh.Type != packet.TypeSuback {
		err = fmt.Errorf("got %v, want SUBACK", fh.Type)
	}
	return err
}

// q2publisher is a QoS 2 publisher whose session state (its messages
// without PUBCOMP, and which of them got PUBREC) outlives its connections,
// as MQTT requires of a client resuming a session [MQTT-4.4.0-1].
type q2publisher struct {
	mu        sync.Mutex
	next      int // next message number
	nextID    uint16
	inflight  map[uint16]*q2msg
	completed []int         // numbers with PUBCOMP, in order
	stopAt    int           // len(completed) at which to close stop
	stop      chan struct{} // closed at stopAt
	window    chan struct{}
}

type q2msg struct {
	seq int
	rec bool // PUBREC came: PUBREL is owed, never the PUBLISH again
}

func newQ2Publisher() *q2publisher {
	return &q2publisher{next: 1, inflight: map[uint16]*q2msg{}, window: make(chan struct{}, 16)}
}

func q2publish(id uint16, seq int, dup bool) *packet.Publish {
	return &packet.Publish{QoS: 2, Dup: dup, PacketID: id, Topic: []byte("q2/t"), Payload: []byte(strconv.Itoa(seq))}
}

// resume resends, in order, what the previous connection left open:
// PUBREL for messages with PUBREC, the PUBLISH with DUP for the others.
func (p *q2publisher) resume(c *q2conn) error {
	p.mu.Lock()
	ids := make([]uint16, 0, len(p.inflight))
	for id := range p.inflight {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b uint16) int { return cmp.Compare(p.inflight[a].seq, p.inflight[b].seq) })
	var pkts []interface {
		Append([]byte, byte) ([]byte, error)
	}
	for _, id := range ids {
		if m := p.inflight[id]; m.rec {
			pkts = append(pkts, &packet.Ack{Type: packet.TypePubrel, PacketID: id})
		} else {
			pkts = append(pkts, q2publish(id, m.seq, true))
		}
	}
	p.mu.Unlock()
	for _, pk := range pkts {
		if err := c.send(pk); err != nil {
			return err
		}
	}
	return nil
}

// readLoop handles PUBREC and PUBCOMP until the connection breaks.
func (p *q2publisher) readLoop(c *q2conn) {
	for {
		fh, body, err := c.rd.ReadPacket(0)
		if err != nil {
			return
		}
		var a packet.Ack
		if a.Decode(packet.Version5, fh, body) != nil {
			continue
		}
		p.mu.Lock()
		m := p.inflight[a.PacketID]
		switch {
		case m == nil:
		case fh.Type == packet.TypePubrec && a.Reason.IsFailure():
			delete(p.inflight, a.PacketID) // refused: the flow ends
			p.release()
		case fh.Type == packet.TypePubrec:
			m.rec = true
			_ = c.send(&packet.Ack{Type: packet.TypePubrel, PacketID: a.PacketID})
		case fh.Type == packet.TypePubcomp && m.rec:
			delete(p.inflight, a.PacketID)
			p.completed = append(p.completed, m.seq)
			if len(p.completed) == p.stopAt {
				close(p.stop)
			}
			p.release()
		}
		p.mu.Unlock()
	}
}

// release frees a window slot; p.mu is held.
func (p *q2publisher) release() {
	select {
	case <-p.window:
	default:
	}
}

// publishLoop publishes new numbered messages, at most 16 without
// PUBCOMP, until done is closed or the connection breaks.
func (p *q2publisher) publishLoop(c *q2conn, done <-chan struct{}) {
	for {
		select {
		case p.window <- struct{}{}:
		case <-done:
			return
		}
		p.mu.Lock()
		for {
			p.nextID++
			if p.nextID == 0 {
				p.nextID = 1
			}
			if p.inflight[p.nextID] == nil {
				break
			}
		}
		id, seq := p.nextID, p.next
		p.next++
		p.inflight[id] = &q2msg{seq: seq}
		p.mu.Unlock()
		if c.send(q2publish(id, seq, false)) != nil {
			return
		}
	}
}

// q2subscriber is a QoS 2 subscriber that keeps the packet ids it
// PUBREC'd until their PUBREL across connections, and so hands each
// message on once [MQTT-4.3.3-10].
type q2subscriber struct {
	mu       sync.Mutex
	awaiting map[uint16]bool
	got      map[int]int // message number → times handed on
}

func (s *q2subscriber) readLoop(c *q2conn) {
	for {
		fh, body, err := c.rd.ReadPacket(0)
		if err != nil {
			return
		}
		switch fh.Type {
		case packet.TypePublish:
			var p packet.Publish
			if p.Decode(packet.Version5, fh, body) != nil || p.QoS != 2 {
				continue
			}
			seq, _ := strconv.Atoi(string(p.Payload))
			s.mu.Lock()
			if !s.awaiting[p.PacketID] {
				s.awaiting[p.PacketID] = true
				s.got[seq]++
			}
			s.mu.Unlock()
			_ = c.send(&packet.Ack{Type: packet.TypePubrec, PacketID: p.PacketID})
		case packet.TypePubrel:
			var a packet.Ack
			if a.Decode(packet.Version5, fh, body) != nil {
				continue
			}
			s.mu.Lock()
			delete(s.awaiting, a.PacketID)
			s.mu.Unlock()
			_ = c.send(&packet.Ack{Type: packet.TypePubcomp, PacketID: a.PacketID})
		}
	}
}

// tally is the exactly-once check: messages completed (PUBCOMP), received
// (distinct), received more than once, and completed but never received.
func tally(p *q2publisher, s *q2subscriber) (completed, received, dups, lost int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.got {
		received++
		dups += n - 1
	}
	for _, seq := range p.completed {
		if s.got[seq] == 0 {
			lost++
		}
	}
	return len(p.completed), received, dups, lost
}

// TestQoS2CrashLoop kills a child broker (-data, -fsync always) with
// SIGKILL at random points of the QoS 2 flows of a publisher and a
// persistent subscriber, both of which resume their sessions; at the end
// every message the publisher got PUBCOMP for reached the subscriber
// exactly once, and no message reached it twice.
func TestQoS2CrashLoop(t *testing.T) {
	cycles := *qos2CrashCycles
	dataDir := t.TempDir()
	pub := newQ2Publisher()
	sub := &q2subscriber{awaiting: map[uint16]bool{}, got: map[int]int{}}
	connect := func(addr string, first bool) (pc, sc *q2conn) {
		t.Helper()
		sc, present, err := dialQoS2(addr, "q2-sub", first)
		if err != nil {
			t.Fatal(err)
		}
		pc, pPresent, err := dialQoS2(addr, "q2-pub", first)
		if err != nil {
			t.Fatal(err)
		}
		if first {
			// Subscribing saves each session at once; the publisher's
			// filter matches nothing.
			if err := sc.subscribe("q2/#"); err != nil {
				t.Fatal(err)
			}
			if err := pc.subscribe("q2-unused"); err != nil {
				t.Fatal(err)
			}
		} else if !present || !pPresent {
			t.Fatalf("sessions lost in the crash: subscriber present %v, publisher present %v", present, pPresent)
		}
		return pc, sc
	}
	start := time.Now()
	for cycle := range cycles {
		cmd, addr := startChild(t, dataDir)
		pc, sc := connect(addr, cycle == 0)
		subDone := make(chan struct{})
		go func() { defer close(subDone); sub.readLoop(sc) }()
		pubRead := make(chan struct{})
		go func() { defer close(pubRead); pub.readLoop(pc) }()
		if err := pub.resume(pc); err != nil {
			t.Fatal(err)
		}
		// The crash point: after 20 to qos2CrashMost more completed messages.
		pub.mu.Lock()
		pub.stopAt = len(pub.completed) + 20 + rand.IntN(max(*qos2CrashMost-20, 1))
		pub.stop = make(chan struct{})
		stop := pub.stop
		pub.mu.Unlock()
		pubDone := make(chan struct{})
		go func() { defer close(pubDone); pub.publishLoop(pc, pubRead) }()
		select {
		case <-stop:
		case <-time.After(60 * time.Second):
			t.Fatalf("cycle %d: QoS 2 publishing stalled", cycle)
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		<-pubRead
		<-pubDone
		<-subDone
		pc.nc.Close()
		sc.nc.Close()
		pub.mu.Lock()
		for len(pub.window) > 0 {
			<-pub.window
		}
		for range len(pub.inflight) { // the flows resumed next hold their slots
			pub.window <- struct{}{}
		}
		pub.mu.Unlock()
		completed, received, dups, lost := tally(pub, sub)
		t.Logf("cycle %d: %d completed, %d received, %d duplicates so far", cycle, completed, received, dups)
		if dups > 0 {
			t.Fatalf("cycle %d: %d messages received twice (lost so far: %d)", cycle, dups, lost)
		}
	}

	// A last restart: the open flows complete, nothing new is published.
	_, addr := startChild(t, dataDir)
	pc, sc := connect(addr, false)
	defer pc.nc.Close()
	defer sc.nc.Close()
	go sub.readLoop(sc)
	go pub.readLoop(pc)
	if err := pub.resume(pc); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		pub.mu.Lock()
		open := len(pub.inflight)
		pub.mu.Unlock()
		_, _, _, lost := tally(pub, sub)
		if open == 0 && lost == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the last restart: %d flows still open, %d completed messages never received", open, lost)
		}
		time.Sleep(20 * time.Millisecond)
	}
	completed, received, dups, lost := tally(pub, sub)
	t.Logf("QoS 2 across %d SIGKILLs in %v: %d completed, %d received, %d duplicates, %d lost",
		cycles, time.Since(start).Round(time.Millisecond), completed, received, dups, lost)
	if dups != 0 || lost != 0 || received != completed {
		t.Fatalf("exactly once violated: %d completed, %d received, %d duplicates, %d lost", completed, received, dups, lost)
	}
	if completed < cycles*20 {
		t.Fatalf("only %d messages completed in %d cycles", completed, cycles)
	}
}
