package shard

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"berth.dev/broker/packet"
)

// socketPair returns the two ends of a loopback TCP connection.
func socketPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	client, err = net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close(); _ = server.Close() })
	return client, server
}

// bodyReader is a connection's reading half on server, as serve sets it
// up, with a poisoning pool of its own.
func bodyReader(server net.Conn) *conn {
	c := &conn{shard: New(Options{SysInterval: -1})} // not started: its pools only
	c.w.raw = rawConn(server)
	c.rd.Reset(c.w.raw.reader(server))
	c.rd.Use(make([]byte, readBufSize))
	c.shard.msgBufs.poison = true // its own pool poisons what comes back
	return c
}

func encodePublish(t *testing.T, p *packet.Publish) []byte {
	t.Helper()
	b, err := p.Append(nil, packet.Version5)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBigPublishReadInPlace reads PUBLISH packets from a real socket as
// the read loop does: a big one's body lands in a pooled buffer, not in
// the read buffer (which stays readBufSize), and its message is built
// around those very bytes, with room left for its cached headers; a small
// one is read and copied as before. Once the message is let go, the
// buffer goes back, poisoned.
func TestBigPublishReadInPlace(t *testing.T) {
	client, server := socketPair(t)
	c := bodyReader(server)
	pool := &c.shard.msgBufs
	props := packet.Properties{
		Has: packet.Mask(packet.PropUserProperty) | packet.Mask(packet.PropCorrelationData) |
			packet.Mask(packet.PropContentType),
		ContentType:     []byte("application/octet-stream"),
		CorrelationData: []byte("corr-7"),
		UserProperties:  []packet.UserProperty{{Key: []byte("k1"), Value: []byte("v1")}, {Key: []byte("k2"), Value: []byte("v2")}},
	}
	cases := []struct {
		name    string
		pub     packet.Publish
		inPlace bool
	}{
		{"small", packet.Publish{Topic: []byte("s/1"), Payload: bytes.Repeat([]byte("s"), 100)}, false},
		{"just over the slab", packet.Publish{QoS: 1, PacketID: 1, Topic: []byte("b/1"), Payload: reusePayload('a', 1, 1, slabMaxCopy, "b/1")}, true},
		{"64 KiB with properties", packet.Publish{QoS: 1, PacketID: 2, Topic: []byte("b/2"), Props: props, Payload: reusePayload('a', 1, 2, 65536, "b/2")}, true},
		{"almost the largest class", packet.Publish{Topic: []byte("b/3"), Payload: reusePayload('a', 1, 3, 1<<msgBufMaxShift-1024, "b/3")}, true},
		{"over the largest class", packet.Publish{Topic: []byte("b/4"), Payload: reusePayload('a', 1, 4, 1<<msgBufMaxShift+1, "b/4")}, false},
	}
	for i, tc := range cases {
		if i == len(cases)-1 {
			// Every big body so far went around the read buffer.
			if b := c.rd.Release(); len(b) != readBufSize {
				t.Fatalf("the read buffer is %d bytes after big packets, want %d", len(b), readBufSize)
			}
			c.rd.Use(make([]byte, readBufSize))
		}
		go func() { _, _ = client.Write(encodePublish(t, &tc.pub)) }()
		t.Run(tc.name, func(t *testing.T) {
			_ = server.SetReadDeadline(time.Now().Add(10 * time.Second))
			fh, body, err := c.readPacket(0)
			if err != nil {
				t.Fatal(err)
			}
			var b *msgBuf
			if c.in != nil {
				b = c.in.body
			}
			if (b != nil) != tc.inPlace {
				t.Fatalf("body in a pooled buffer: %v, want %v", b != nil, tc.inPlace)
			}
			var p packet.Publish
			if err := p.Decode(packet.Version5, fh, body); err != nil {
				t.Fatal(err)
			}
			m := c.newMessage(&p, p.Topic, time.Now(), 1)
			if c.in != nil && c.in.body != nil {
				t.Fatal("the slab kept the body after building its message")
			}
			if string(m.topic) != string(tc.pub.Topic) || !bytes.Equal(m.payload, tc.pub.Payload) ||
				string(m.props.full().CorrelationData) != string(tc.pub.Props.CorrelationData) || len(m.props.full().UserProperties) != len(tc.pub.Props.UserProperties) {
				t.Fatal("the message differs from the packet")
			}
			if !tc.inPlace {
				// A small one alone in its read comes from the pool of
				// small messages (smallmsg.go), a huge one from the heap.
				if small := m.buf != nil && m.buf.small == m; small != (len(body) <= int(smallMsgBytes)) {
					t.Fatalf("a %d-byte message not read in place: pooled small message %v", len(body), small)
				}
				m.unref()
				return
			}
			if &body[0] != &b.b[0] {
				t.Fatal("the body was not read into the pooled buffer")
			}
			if m.buf != b || &m.payload[0] != &b.b[len(body)-len(m.payload)] {
				t.Fatal("the message was not built where its body was read: the payload was copied")
			}
			for _, v := range []byte{packet.Version311, packet.Version5} {
				if _, err := m.header(v, 1); err != nil {
					t.Fatal(err)
				}
			}
			if hc := m.hdr.Load(); hc == nil || hc.nreg != 1 {
				t.Fatalf("the cached headers took more than the room after the body: %+v", hc)
			}
			if got := pool.reading.Load(); got != 0 {
				t.Fatalf("%d bytes still counted as reading", got)
			}
			payload := m.payload
			m.unref()
			if payload[0] != poisonByte {
				t.Fatal("the buffer was not given back when its message was let go")
			}
		})
	}
	if pool.gets.Load() != 4 || pool.puts.Load() != 4 {
		t.Fatalf("%d buffers taken, %d given back; want 4", pool.gets.Load(), pool.puts.Load())
	}
}

// repeatReader returns data over and over, as a socket full of one packet.
type repeatReader struct {
	data []byte
	off  int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := copy(p, r.data[r.off:])
	r.off = (r.off + n) % len(r.data)
	return n, nil
}

// TestBigPublishReadAllocations: reading a 64 KiB PUBLISH into a pooled
// buffer, building its message there with its cached header, and letting
// it go allocates only the message itself.
func TestBigPublishReadAllocations(t *testing.T) {
	raw := encodePublish(t, &packet.Publish{Topic: []byte("b/1"), Payload: make([]byte, 65536)})
	c := &conn{shard: New(Options{SysInterval: -1})} // not started: its pools only
	c.rd.Reset(&repeatReader{data: raw})
	c.rd.Use(make([]byte, readBufSize))
	// Big bodies come from the shard's own pool.
	var p packet.Publish
	one := func() {
		fh, body, err := c.readPacket(0)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Decode(packet.Version5, fh, body); err != nil {
			t.Fatal(err)
		}
		m := c.newMessage(&p, p.Topic, time.Now(), 1)
		if m.buf == nil {
			t.Fatal("not built in a pooled buffer")
		}
		if _, err := m.header(packet.Version5, 0); err != nil {
			t.Fatal(err)
		}
		m.unref()
		c.dropBody()
	}
	one()
	if allocs := testing.AllocsPerRun(100, one); allocs > 1 {
		t.Errorf("%v allocations per big PUBLISH read, want 1 (the message)", allocs)
	}
}

// TestBigPublishBodyHostile: a declared size over the maximum is refused
// before any buffer is taken; a peer that stalls mid-body holds its one
// buffer until the read deadline, a peer that goes away gives it back
// too, and once the shard lends bodyReadingMax bytes to bodies still
// arriving a big body is read into the read buffer instead, which grows
// only as bytes arrive.
func TestBigPublishBodyHostile(t *testing.T) {
	raw := encodePublish(t, &packet.Publish{Topic: []byte("b/1"), Payload: reusePayload('a', 1, 1, 65536, "b/1")})
	t.Run("too large", func(t *testing.T) {
		client, server := socketPair(t)
		c := bodyReader(server)
		if _, err := client.Write(raw[:5]); err != nil {
			t.Fatal(err)
		}
		_ = server.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, _, err := c.readPacket(len(raw) - 1)
		if !errors.Is(err, packet.ErrPacketTooLarge) {
			t.Fatalf("err = %v, want 0x95", err)
		}
		if n := c.shard.msgBufs.gets.Load(); n != 0 {
			t.Fatalf("%d buffers taken for a refused packet", n)
		}
	})
	t.Run("stall", func(t *testing.T) {
		client, server := socketPair(t)
		c := bodyReader(server)
		if _, err := client.Write(raw[:len(raw)/2]); err != nil {
			t.Fatal(err)
		}
		_ = server.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		_, _, err := c.readPacket(0)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("err = %v, want the read deadline", err)
		}
		pool := &c.shard.msgBufs
		if pool.gets.Load() != 1 || pool.puts.Load() != 1 || pool.reading.Load() != 0 || c.in != nil && c.in.body != nil {
			t.Fatalf("%d taken, %d given back, %d bytes reading", pool.gets.Load(), pool.puts.Load(), pool.reading.Load())
		}
	})
	t.Run("gone", func(t *testing.T) {
		client, server := socketPair(t)
		c := bodyReader(server)
		if _, err := client.Write(raw[:len(raw)-1]); err != nil {
			t.Fatal(err)
		}
		_ = client.Close()
		_ = server.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, _, err := c.readPacket(0)
		if err != io.ErrUnexpectedEOF {
			t.Fatalf("err = %v, want io.ErrUnexpectedEOF", err)
		}
		if pool := &c.shard.msgBufs; pool.gets.Load() != 1 || pool.puts.Load() != 1 || pool.reading.Load() != 0 {
			t.Fatalf("%d taken, %d given back, %d bytes reading", pool.gets.Load(), pool.puts.Load(), pool.reading.Load())
		}
	})
	t.Run("lending bounded", func(t *testing.T) {
		client, server := socketPair(t)
		c := bodyReader(server)
		pool := &c.shard.msgBufs
		pool.reading.Store(bodyReadingMax - 65536) // stalled peers hold nearly all
		go func() { _, _ = client.Write(raw) }()
		_ = server.SetReadDeadline(time.Now().Add(10 * time.Second))
		fh, body, err := c.readPacket(0)
		if err != nil || fh.Remaining != len(body) {
			t.Fatal(err)
		}
		if c.in != nil && c.in.body != nil || pool.gets.Load() != 0 || pool.reading.Load() != bodyReadingMax-65536 {
			t.Fatalf("a buffer was lent past bodyReadingMax: %d taken", pool.gets.Load())
		}
		if !bytes.Equal(body, raw[len(raw)-len(body):]) {
			t.Fatal("the body read into the read buffer differs")
		}
	})
}

// TestBigPublishThroughBroker sends big PUBLISH packets that take each
// branch of building in place through a real broker in poisoning mode: a
// topic alias set and then used (the aliased topic is copied in after the
// body), properties, a topic too long for the room after the body (the
// message is copied), one refused (not authorized) and a malformed one.
// Deliveries are byte-exact and every buffer comes back.
func TestBigPublishThroughBroker(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{poisonFreed: true}, ConnInfo{TenantID: "a"})
	sub := v5Client(t, b, "sub")
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("#"), QoS: 1})
	pub := v5Client(t, b, "pub")
	alias := func(a uint16) packet.Properties {
		return packet.Properties{Has: packet.Mask(packet.PropTopicAlias) | packet.Mask(packet.PropUserProperty), TopicAlias: a,
			UserProperties: []packet.UserProperty{{Key: []byte("k"), Value: []byte("v")}}}
	}
	long := string(bytes.Repeat([]byte("l"), 3000))
	sends := []struct {
		pub   packet.Publish
		topic string
	}{
		{packet.Publish{QoS: 1, PacketID: 1, Topic: []byte("big/1"), Props: alias(1), Payload: reusePayload('a', 1, 1, 65536, "big/1")}, "big/1"},
		{packet.Publish{QoS: 1, PacketID: 2, Props: alias(1), Payload: reusePayload('a', 1, 2, 20000, "big/1")}, "big/1"},
		{packet.Publish{QoS: 1, PacketID: 3, Topic: []byte(long), Payload: reusePayload('a', 1, 3, 5000, long)}, long},
	}
	for _, s := range sends {
		pub.send(&s.pub)
		if a := pub.ack(packet.TypePuback); a.PacketID != s.pub.PacketID || a.Reason.IsFailure() {
			t.Fatalf("PUBACK %d %v", a.PacketID, a.Reason)
		}
		got := sub.publish()
		if string(got.Topic) != s.topic {
			t.Fatalf("delivered on %.20q, want %.20q", got.Topic, s.topic)
		}
		if err := checkPayload('a', got.Topic, got.Payload); err != nil || !bytes.Equal(got.Payload, s.pub.Payload) {
			t.Fatalf("payload on %.20q: %v", got.Topic, err)
		}
		if len(s.pub.Props.UserProperties) > 0 && (len(got.Props.UserProperties) != 1 || string(got.Props.UserProperties[0].Value) != "v") {
			t.Fatalf("user properties %v", got.Props.UserProperties)
		}
		sub.send(&packet.Ack{Type: packet.TypePuback, PacketID: got.PacketID})
	}
	pub.send(&packet.Publish{QoS: 1, PacketID: 4, Topic: []byte("$SYS/x"), Payload: make([]byte, 20000)})
	if a := pub.ack(packet.TypePuback); a.Reason != packet.ErrNotAuthorized {
		t.Fatalf("PUBACK %v for $SYS, want 0x87", a.Reason)
	}
	bad := encodePublish(t, &packet.Publish{Topic: []byte("big/+"), Payload: make([]byte, 20000)}) // a wildcard in a topic name
	pub.sendBytes(bad)
	pub.expectDisconnect(packet.ErrTopicNameInvalid)
	pool := &b.shard.msgBufs
	eventually(t, "every pooled buffer given back", func() bool { return pool.gets.Load() == pool.puts.Load() })
	if pool.gets.Load() < 5 || pool.reading.Load() != 0 {
		t.Fatalf("%d buffers taken, %d bytes still reading", pool.gets.Load(), pool.reading.Load())
	}
}

// TestBigPublishStallEndsAtKeepAlive: a client that sends half of a big
// PUBLISH and stalls is disconnected by its keep alive like any silent
// client, and the buffer its body was being read into goes back.
func TestBigPublishStallEndsAtKeepAlive(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{poisonFreed: true}, ConnInfo{TenantID: "a"})
	c := dialRaw(t, b.addr, packet.Version5)
	if ack := c.connect(&packet.Connect{ClientID: []byte("stall"), CleanStart: true, KeepAlive: 1}); ack.Reason != packet.CodeSuccess {
		t.Fatalf("CONNACK %v", ack.Reason)
	}
	raw := encodePublish(t, &packet.Publish{Topic: []byte("b/1"), Payload: make([]byte, 65536)})
	start := time.Now()
	c.sendBytes(raw[:len(raw)/2])
	pool := &b.shard.msgBufs
	eventually(t, "the body's buffer taken", func() bool { return pool.gets.Load() == 1 })
	c.expectDisconnect(packet.ErrKeepAliveTimeout)
	t.Logf("disconnected %v after stalling mid-body", time.Since(start))
	eventually(t, "the buffer given back", func() bool { return pool.puts.Load() == 1 && pool.reading.Load() == 0 })
}

// BenchmarkBigPublishIngest: 64 KiB QoS 0 PUBLISH packets from one client
// through a real broker over loopback, with no subscriber (reading and
// building the message is all the broker does) and with one that reads
// every delivery. cpu-ns/op is the process's user+system CPU per message,
// the client's writes (and the subscriber's reads) included.
func BenchmarkBigPublishIngest(b *testing.B) {
	for _, subs := range []int{0, 1} {
		b.Run(fmt.Sprintf("subscribers=%d", subs), func(b *testing.B) {
			br := startBroker(b, Options{}, ConnInfo{TenantID: "a"})
			for i := range subs {
				c := dialRaw(b, br.addr, packet.Version5)
				c.connectOK(fmt.Sprintf("sub%d", i))
				c.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("big/#")})
				go func() {
					rd := packet.NewReader(c.nc, 1<<17)
					for {
						if _, _, err := rd.ReadPacket(0); err != nil {
							return
						}
					}
				}()
			}
			pub := dialRaw(b, br.addr, packet.Version5)
			pub.connectOK("pub")
			raw, err := (&packet.Publish{Topic: []byte("big/1"), Payload: make([]byte, 65536)}).Append(nil, packet.Version5)
			if err != nil {
				b.Fatal(err)
			}
			const batch = 16
			many := bytes.Repeat(raw, batch)
			stats := &br.shard.stats
			base := stats.msgsIn.Load()
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			var before, after syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
			b.ResetTimer()
			_ = pub.nc.SetWriteDeadline(time.Now().Add(time.Minute))
			for n := b.N; n > 0; n -= batch {
				if _, err := pub.nc.Write(many[:min(n, batch)*len(raw)]); err != nil {
					b.Fatal(err)
				}
			}
			for deadline := time.Now().Add(time.Minute); stats.msgsIn.Load()-base < uint64(b.N); {
				if time.Now().After(deadline) {
					b.Fatalf("%d of %d messages read", stats.msgsIn.Load()-base, b.N)
				}
				runtime.Gosched()
			}
			b.StopTimer()
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
			cpu := time.Duration(syscall.TimevalToNsec(after.Utime) + syscall.TimevalToNsec(after.Stime) -
				syscall.TimevalToNsec(before.Utime) - syscall.TimevalToNsec(before.Stime))
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}
