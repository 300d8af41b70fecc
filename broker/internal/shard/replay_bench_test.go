package shard

import (
	"bufio"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"berth.dev/broker/internal/store"
	"berth.dev/broker/internal/topic"
	"berth.dev/broker/internal/wal"
	"berth.dev/broker/packet"
)

var (
	replayBacklog = flag.Int("replay-backlog", 20_000, "BenchmarkBacklogReplay: messages in the backlog (make bench-replay: 1,000,000)")
	replayPayload = flag.Int("replay-payload", 64, "BenchmarkBacklogReplay: payload bytes per message")
)

// BenchmarkBacklogReplay measures a persistent session coming back to a
// backlog of -replay-backlog QoS 1 messages in the log (payloads of
// -replay-payload bytes; `make bench-replay` runs 1,000,000): from CONNECT
// to the last message, every message checked to arrive in order and
// acknowledged as it is read (one write per read burst). "sendfile" is a
// plain TCP connection (payloads by sendfile(2) from the segment files),
// "copy" the same connection hidden behind a wrapper, as TLS and WebSocket
// are (payloads through a pooled buffer). It reports msgs/s and the CPU
// time of the process (the shard and the reading client together) per
// message and in all.
func BenchmarkBacklogReplay(b *testing.B) {
	for _, tc := range []struct {
		name string
		wrap func(net.Conn) net.Conn
	}{
		{"sendfile", nil},
		{"copy", func(c net.Conn) net.Conn { return plainConn{c} }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			n, size := *replayBacklog, *replayPayload
			for range b.N {
				b.StopTimer()
				r := benchReplay(b, n, size, tc.wrap)
				b.StartTimer()
				b.ReportMetric(float64(n)/r.took.Seconds(), "msgs/s")
				b.ReportMetric(float64(r.cpu.Nanoseconds())/float64(n), "cpu-ns/msg")
				b.ReportMetric(r.cpu.Seconds()/r.took.Seconds(), "cores")
				b.ReportMetric(float64(n)/r.fillTook.Seconds(), "logged-msgs/s")
				b.Logf("%d messages of %d B replayed in order in %v (%.0f msg/s), CPU %v (%.2f cores); backlog logged in %v",
					n, size, r.took.Round(time.Millisecond), float64(n)/r.took.Seconds(), r.cpu.Round(time.Millisecond),
					r.cpu.Seconds()/r.took.Seconds(), r.fillTook.Round(time.Millisecond))
			}
		})
	}
}

type replayResult struct {
	took, cpu, fillTook time.Duration
}

func benchReplay(b *testing.B, n, size int, wrap func(net.Conn) net.Conn) replayResult {
	b.Helper()
	st, err := store.OpenWAL(store.WALOptions{Dir: b.TempDir(), Fsync: wal.SyncNever})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	sh := New(Options{Store: st, MessageLog: st.Messages(), SysInterval: -1, MaxInflight: 65535, CheckpointInterval: time.Hour})
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = sh.Shutdown(ctx)
	}()
	start := time.Now()
	if err := fillOfflineSeq(sh, "replayer", "z/#", n, size); err != nil {
		b.Fatal(err)
	}
	fillTook := time.Since(start)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if wrap != nil {
				c = wrap(c)
			}
			go sh.ServeConn(c, ConnInfo{AllowAnonymous: true})
		}
	}()
	cpu0 := processCPU()
	start = time.Now()
	if err := readSeq(ln.Addr().String(), "replayer", n, size); err != nil {
		b.Fatal(err)
	}
	return replayResult{took: time.Since(start), cpu: processCPU() - cpu0, fillTook: fillTook}
}

// fillOfflineSeq is fillOffline with payloads numbered by a 4-byte
// big-endian sequence number, published without a copy per message.
func fillOfflineSeq(sh *Shard, clientID, filter string, n, size int) error {
	return fillOfflineWith(sh, clientID, filter, n, func(i int) []byte {
		p := make([]byte, max(size, 4))
		binary.BigEndian.PutUint32(p, uint32(i))
		return p
	})
}

// readSeq resumes clientID's session and reads n messages, checking their
// order by the sequence number in each payload and acknowledging them.
func readSeq(addr, clientID string, n, size int) error {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer nc.Close()
	cp := sessionConnect(clientID, neverExpires, false)
	b, _ := cp.Append(nil, packet.Version5)
	if _, err := nc.Write(b); err != nil {
		return err
	}
	rd := packet.NewReader(nc, 256<<10)
	w := bufio.NewWriterSize(nc, 64<<10)
	var ack []byte
	for got := 0; got < n; {
		if rd.Buffered() == 0 {
			if err := w.Flush(); err != nil { // acks of the last burst
				return err
			}
			_ = nc.SetReadDeadline(time.Now().Add(30 * time.Second))
		}
		fh, body, err := rd.ReadPacket(0)
		if err != nil {
			return fmt.Errorf("after %d messages: %w", got, err)
		}
		if fh.Type != packet.TypePublish {
			continue
		}
		var p packet.Publish
		if err := p.Decode(packet.Version5, fh, body); err != nil {
			return err
		}
		if len(p.Payload) != max(size, 4) || binary.BigEndian.Uint32(p.Payload) != uint32(got) {
			return fmt.Errorf("message %d: %d bytes, sequence %d", got, len(p.Payload), binary.BigEndian.Uint32(p.Payload))
		}
		ack, _ = (&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID}).Append(ack[:0], packet.Version5)
		if _, err := w.Write(ack); err != nil {
			return err
		}
		got++
	}
	return w.Flush()
}

// processCPU is the user and system CPU time of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// fillOfflineWith creates an offline persistent session subscribed to
// filter at QoS 1 and publishes n QoS 1 messages to it, message i with
// payload(i).
func fillOfflineWith(sh *Shard, clientID, filter string, n int, payload func(i int) []byte) error {
	sh.mu.Lock()
	sess := sh.newSessionLocked(clientID)
	sess.expiry = neverExpires
	sh.mu.Unlock()
	if _, err := sh.tree.Subscribe(sess.id, filter, topic.Options{QoS: 1}); err != nil {
		return err
	}
	topicName := strings.TrimSuffix(filter, "#") + "t"
	now := time.Now()
	for i := range n {
		sh.publishInternal(newSimpleMessage(topicName, payload(i), 1, false, now))
	}
	if got := pending(sh, clientID); got != n {
		return fmt.Errorf("offline session holds %d pending, want %d", got, n)
	}
	return nil
}
