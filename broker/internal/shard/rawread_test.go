//go:build linux

package shard

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"berth.dev/broker/packet"
)

// countingConn passes everything through to the socket, as the node's
// PROXY protocol wrapper does, and counts the reads that go through it:
// the net package's own Read, with its syscall bookkeeping and its wait.
// countedRawReader is a socket pair whose server end is read by a
// rawIO's reader under a pass-through wrapper that counts the reads
// reaching the net package.
func countedRawReader(t *testing.T) (client net.Conn, cc *countingConn, raw *rawIO, rd io.Reader) {
	t.Helper()
	client, server := socketPair(t)
	cc = &countingConn{Conn: server}
	if raw = rawConn(cc); raw == nil {
		t.Fatal("no raw socket under a pass-through wrapper")
	}
	return client, cc, raw, raw.reader(cc)
}

type countingConn struct {
	net.Conn
	reads atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	c.reads.Add(1)
	return c.Conn.Read(p)
}

func (c *countingConn) NetConn() net.Conn { return c.Conn }

// TestSockReader: bytes already in the socket are read without the net
// package's Read (rawIO.tryRead, a RawSyscall), and everything else (the
// wait for input, the read deadline, the end of the stream) is still
// nc.Read's, with its errors.
func TestSockReader(t *testing.T) {
	client, cc, raw, rd := countedRawReader(t)
	buf := make([]byte, 64)

	if _, err := client.Write([]byte("ready")); err != nil {
		t.Fatal(err)
	}
	if err := raw.waitReadable(); err != nil {
		t.Fatal(err)
	}
	if n, err := rd.Read(buf); err != nil || string(buf[:n]) != "ready" {
		t.Fatalf("read %q, %v; want \"ready\"", buf[:n], err)
	}
	if got := cc.reads.Load(); got != 0 {
		t.Fatalf("%d reads through nc for bytes that were there, want 0", got)
	}
	// A read allocates nothing.
	x := []byte("x")
	if allocs := testing.AllocsPerRun(100, func() {
		if _, err := client.Write(x); err != nil {
			t.Fatal(err)
		}
		if _, err := rd.Read(buf[:1]); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Fatalf("%v allocations per read", allocs)
	}

	// Nothing there: nc.Read waits, and its deadline holds.
	before := cc.reads.Load()
	if err := cc.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := rd.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read of an empty socket past its deadline: %v, want a timeout", err)
	}
	if cc.reads.Load() == before {
		t.Fatal("an empty socket was not left to nc.Read")
	}
	// The end of the stream is io.EOF, as from nc.
	if err := cc.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	client.Close()
	if n, err := rd.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("read after the peer closed: %d, %v; want 0, io.EOF", n, err)
	}
}

// TestLonePublishReadsRaw: a publisher sending one PUBLISH at a time, each
// delivered before the next is sent (what the latency benchmark does at
// 1,000 msg/s), has its packets read by the shard without the net
// package's Read: the reader waits for input (peek), then reads what is
// there with a RawSyscall. A Go syscall.Syscall there, the first after the
// reader woke, would wake the runtime's monitor thread for every message.
func TestLonePublishReadsRaw(t *testing.T) {
	sh := New(Options{SysInterval: -1})
	if err := sh.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns := make(chan *countingConn, 2)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			cc := &countingConn{Conn: c}
			conns <- cc
			go sh.ServeConn(cc, ConnInfo{AllowAnonymous: true})
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := sh.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	tb := &testBroker{shard: sh, addr: ln.Addr().String()}

	sub := v5Client(t, tb, "sub")
	<-conns
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("lone/t")})
	pub := v5Client(t, tb, "pub")
	pc := <-conns
	const n = 50
	before := pc.reads.Load()
	for i := range n {
		pub.send(&packet.Publish{Topic: []byte("lone/t"), Payload: []byte{byte(i)}})
		if p := sub.publish(); len(p.Payload) != 1 || p.Payload[0] != byte(i) {
			t.Fatalf("message %d: payload %v", i, p.Payload)
		}
	}
	// Without the raw read every PUBLISH is one nc.Read (n); a few may
	// still go through it when the peek and the read race the client's
	// write (a read that finds part of a packet waits in nc.Read).
	if got := pc.reads.Load() - before; got > n/5 {
		t.Fatalf("%d of %d lone PUBLISH packets read through nc.Read, want at most %d", got, n, n/5)
	} else {
		t.Logf("%d of %d lone PUBLISH packets read through nc.Read", got, n)
	}
}
