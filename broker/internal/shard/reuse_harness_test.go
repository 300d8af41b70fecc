package shard

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"berth.dev/broker/internal/wal"
	"berth.dev/broker/packet"
)

// The buffer-reuse harness: two tenants' shards in one process, both in
// poisoning mode (poison.go), with real MQTT 5 clients on sockets. Every
// payload describes itself (tenant, publisher, sequence, size, topic) and
// is filled with a pattern derived from that description, so a delivery
// whose bytes were freed (0xDB), reused by another message, or taken from
// the other tenant fails checkPayload.

// reuseSizes cover slab-packed messages (up to slabMaxCopy), messages
// with buffers of their own, and 64 KiB payloads.
var reuseSizes = [...]int{reuseHeader, 64, 700, 3000, 5000, 20000, 65536}

const (
	reuseMagic  = "BRTHPAY1"
	reuseHeader = len(reuseMagic) + 1 + 1 + 4 + 4 + 4 // magic, tenant, publisher, seq, size, topic crc
)

// reusePayload builds the self-describing payload.
func reusePayload(tenant, pub byte, seq uint32, size int, topicName string) []byte {
	p := make([]byte, size)
	n := copy(p, reuseMagic)
	p[n], p[n+1] = tenant, pub
	binary.BigEndian.PutUint32(p[n+2:], seq)
	binary.BigEndian.PutUint32(p[n+6:], uint32(size))
	binary.BigEndian.PutUint32(p[n+10:], crc32.ChecksumIEEE([]byte(topicName)))
	fillPattern(p[reuseHeader:], tenant, pub, seq)
	return p
}

func fillPattern(b []byte, tenant, pub byte, seq uint32) {
	x := uint32(tenant)<<24 ^ uint32(pub)<<16 ^ seq*2654435761
	for i := range b {
		x = x*1664525 + 1013904223
		b[i] = byte(x >> 24)
	}
}

// checkPayload reports how a payload delivered to tenant on topicName
// differs from what its publisher sent.
func checkPayload(tenant byte, topicName, p []byte) error {
	if len(p) < reuseHeader || string(p[:len(reuseMagic)]) != reuseMagic {
		return fmt.Errorf("payload of %d bytes without its header: % x", len(p), p[:min(len(p), 32)])
	}
	n := len(reuseMagic)
	if p[n] != tenant {
		return fmt.Errorf("tenant %q got tenant %q's message", tenant, p[n])
	}
	pub, seq := p[n+1], binary.BigEndian.Uint32(p[n+2:])
	if size := int(binary.BigEndian.Uint32(p[n+6:])); size != len(p) {
		return fmt.Errorf("publisher %d seq %d: %d bytes, sent %d", pub, seq, len(p), size)
	}
	if binary.BigEndian.Uint32(p[n+10:]) != crc32.ChecksumIEEE(topicName) {
		return fmt.Errorf("publisher %d seq %d delivered on topic %q, not the one it was sent to", pub, seq, topicName)
	}
	want := make([]byte, len(p)-reuseHeader)
	fillPattern(want, tenant, pub, seq)
	for i, b := range p[reuseHeader:] {
		if b != want[i] {
			return fmt.Errorf("publisher %d seq %d (%d bytes): byte %d is %#x, want %#x (poison %#x)",
				pub, seq, len(p), reuseHeader+i, b, want[i], poisonByte)
		}
	}
	return nil
}

// reuseTenant is one tenant's shard and what its clients checked.
type reuseTenant struct {
	t       testing.TB
	id      byte
	addr    string
	durable bool        // has a message log: offline queues are stored, replay works
	dialer  *net.Dialer // nil: a plain one

	checked, big, retained, replayed, bad atomic.Int64
	published                             atomic.Int64
}

// newReuseWorld starts tenant 'a' on a WAL store (stored offline queues,
// replay) and tenant 'b' in memory (queues of messages), both poisoning.
func newReuseWorld(t testing.TB) [2]*reuseTenant {
	t.Helper()
	st := openWALStore(t, t.TempDir(), wal.SyncNever)
	a := startBroker(t, Options{Store: st, MessageLog: st.Messages(), CheckpointInterval: 20 * time.Millisecond,
		poisonFreed: true}, ConnInfo{TenantID: "a"})
	b := startBroker(t, Options{poisonFreed: true, MaxInflight: 64}, ConnInfo{TenantID: "b"})
	return [2]*reuseTenant{
		{t: t, id: 'a', addr: a.addr, durable: true},
		{t: t, id: 'b', addr: b.addr},
	}
}

// reuseConn is one MQTT 5 connection; sends may come from two goroutines.
type reuseConn struct {
	nc  net.Conn
	rd  *packet.Reader
	wmu sync.Mutex
}

func (c *reuseConn) send(p appender) error {
	b, err := p.Append(nil, packet.Version5)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err = c.nc.Write(b)
	return err
}

// dial connects id; a persistent session (clean false) outlives the
// connection by five minutes.
func (tn *reuseTenant) dial(id string, clean bool) (*reuseConn, error) {
	d := tn.dialer
	if d == nil {
		d = &net.Dialer{Timeout: 5 * time.Second}
	}
	nc, err := d.Dial("tcp", tn.addr)
	if err != nil {
		return nil, err
	}
	c := &reuseConn{nc: nc, rd: packet.NewReader(nc, 1024)}
	cp := &packet.Connect{ClientID: []byte(id), CleanStart: clean,
		Props: packet.Properties{Has: packet.Mask(packet.PropSessionExpiry), SessionExpiry: 300}}
	if err := c.send(cp); err != nil {
		_ = nc.Close()
		return nil, err
	}
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	fh, body, err := c.rd.ReadPacket(0)
	if err == nil && fh.Type != packet.TypeConnack {
		err = fmt.Errorf("got %v, want CONNACK", fh.Type)
	}
	var ack packet.Connack
	if err == nil {
		err = ack.Decode(packet.Version5, fh, body)
	}
	if err == nil && ack.Reason != packet.CodeSuccess {
		err = fmt.Errorf("CONNACK %v", ack.Reason)
	}
	if err != nil {
		_ = nc.Close()
		return nil, fmt.Errorf("connecting %s: %w", id, err)
	}
	return c, nil
}

// receive reads c until it closes, checking every PUBLISH and
// acknowledging QoS 1 ones (but, with ackOdds < 1, leaving some
// unacknowledged in the inflight window until the next connection).
// replay marks deliveries as replayed when they are not retained. A
// non-nil pause is called every 16 deliveries: a slow reader, whose
// writer is left with partly written batches.
func (tn *reuseTenant) receive(c *reuseConn, seed uint64, ackOdds float64, replay bool, pause func()) {
	rng := rand.New(rand.NewPCG(seed, 19))
	var p packet.Publish
	for {
		_ = c.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
		fh, body, err := c.rd.ReadPacket(0)
		if err != nil {
			return // closed: by the test, a takeover, or the end
		}
		if fh.Type != packet.TypePublish {
			continue
		}
		p = packet.Publish{}
		if err := p.Decode(packet.Version5, fh, body); err != nil {
			tn.t.Errorf("tenant %c: decoding PUBLISH: %v", tn.id, err)
			return
		}
		if err := checkPayload(tn.id, p.Topic, p.Payload); err != nil {
			tn.bad.Add(1)
			tn.t.Errorf("tenant %c, topic %q, retain %v, replay %v: %v", tn.id, p.Topic, p.Retain, replay, err)
		}
		if n := tn.checked.Add(1); pause != nil && n%16 == 0 {
			pause()
		}
		if len(p.Payload) >= 64<<10 {
			tn.big.Add(1)
		}
		switch {
		case p.Retain:
			tn.retained.Add(1)
		case replay:
			tn.replayed.Add(1)
		}
		if p.QoS == 1 && rng.Float64() < ackOdds {
			if c.send(&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID}) != nil {
				return
			}
		}
	}
}

// subscribe sends a SUBSCRIBE to t/# and r/# (its SUBACK is read by
// receive), asking for a replay from the log's start when replay is set.
func (c *reuseConn) subscribe(id uint16, qos byte, replay bool) error {
	var props packet.Properties
	if replay {
		props.UserProperties = []packet.UserProperty{{Key: []byte(ReplayProperty), Value: []byte("0")}}
	}
	return c.send(&packet.Subscribe{PacketID: id, Props: props, Subscriptions: []packet.Subscription{
		{Filter: []byte("t/#"), QoS: qos}, {Filter: []byte("r/#"), QoS: qos}}})
}

// reuseSub is a persistent subscriber that disconnects, stays away while
// messages queue for it, comes back, and is taken over.
type reuseSub struct {
	tn   *reuseTenant
	id   string
	qos  byte
	slow bool // a small socket receive buffer, and pauses in reading
	mu   sync.Mutex
	conn *reuseConn // nil while offline
	wg   sync.WaitGroup
	n    uint64 // connections made, to seed their readers
}

func (tn *reuseTenant) newSub(id string, qos byte, slow bool) (*reuseSub, error) {
	s := &reuseSub{tn: tn, id: id, qos: qos, slow: slow}
	c, err := tn.dial(id, true)
	if err != nil {
		return nil, err
	}
	if err := c.subscribe(1, qos, false); err != nil {
		return nil, err
	}
	s.start(c)
	return s, nil
}

func (s *reuseSub) start(c *reuseConn) {
	s.n++
	s.conn = c
	s.wg.Add(1)
	seed := s.n
	var pause func()
	if s.slow {
		if tc, ok := c.nc.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(4096)
		}
		// Stop reading until about 8 more messages were published.
		pause = func() { waitPublished(s.tn, 8, nil) }
	}
	go func() {
		defer s.wg.Done()
		s.tn.receive(c, seed, 0.9, false, pause)
	}()
}

// disconnect closes the connection without DISCONNECT: the session stays.
func (s *reuseSub) disconnect() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil {
		_ = s.conn.nc.Close()
		s.conn = nil
	}
}

// reconnect resumes the session (redelivering its inflight window and
// queue) if offline; takeover resumes it on a new connection while the
// old one is still open, which the broker closes.
func (s *reuseSub) reconnect(takeover bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil && !takeover {
		return nil
	}
	c, err := s.tn.dial(s.id, false)
	if err != nil {
		return err
	}
	if old := s.conn; old != nil {
		_ = old.nc.Close()
	}
	s.start(c)
	return nil
}

func (s *reuseSub) close() {
	s.disconnect()
	s.wg.Wait()
}

// peek connects a clean subscriber that gets the retained messages (and,
// on a durable tenant, the log replayed from its start), reads until the
// broker has been silent for quiet, and leaves.
func (tn *reuseTenant) peek(id string, quiet time.Duration) error {
	c, err := tn.dial(id, true)
	if err != nil {
		return err
	}
	if err := c.subscribe(1, 1, tn.durable); err != nil {
		_ = c.nc.Close()
		return err
	}
	done := make(chan struct{})
	go func() { defer close(done); tn.receive(c, 7, 1, tn.durable, nil) }()
	before := tn.checked.Load()
	deadline := time.Now().Add(10 * time.Second)
	for last := time.Now(); time.Since(last) < quiet && time.Now().Before(deadline); {
		time.Sleep(quiet / 10)
		if n := tn.checked.Load(); n != before {
			before, last = n, time.Now()
		}
	}
	_ = c.nc.Close()
	<-done
	return nil
}

// reusePub is a publisher connection; the broker's acks are read and
// dropped.
type reusePub struct {
	tn   *reuseTenant
	id   string
	pub  byte
	seq  uint32
	conn *reuseConn
	done chan struct{}
}

func (tn *reuseTenant) newPub(pub byte) (*reusePub, error) {
	p := &reusePub{tn: tn, id: fmt.Sprintf("pub%d", pub), pub: pub}
	return p, p.connect()
}

func (p *reusePub) connect() error {
	c, err := p.tn.dial(p.id, true)
	if err != nil {
		return err
	}
	if old := p.conn; old != nil {
		_ = old.nc.Close() // a takeover: the broker has closed it already, or will
		<-p.done
	}
	p.conn, p.done = c, make(chan struct{})
	go func(done chan struct{}) {
		defer close(done)
		for {
			if _, _, err := c.rd.ReadPacket(0); err != nil {
				return
			}
		}
	}(p.done)
	return nil
}

// publish sends one message of reuseSizes[size%len] bytes.
func (p *reusePub) publish(size int, qos byte, retain bool, k int) error {
	p.seq++
	topicName := fmt.Sprintf("t/%d", k)
	if retain {
		topicName = fmt.Sprintf("r/%d", k)
	}
	payload := reusePayload(p.tn.id, p.pub, p.seq, reuseSizes[size%len(reuseSizes)], topicName)
	pk := &packet.Publish{QoS: qos, Retain: retain, Topic: []byte(topicName), Payload: payload}
	if qos > 0 {
		pk.PacketID = uint16(p.seq%60000) + 1
	}
	err := p.conn.send(pk)
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	p.tn.published.Add(1)
	return nil
}

func (p *reusePub) close() {
	if p.conn != nil {
		_ = p.conn.nc.Close()
		<-p.done
	}
}
