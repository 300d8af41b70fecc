package shard

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"berth.dev/broker/internal/store"
	"berth.dev/broker/internal/topic"
	"berth.dev/broker/internal/wal"
	"berth.dev/broker/packet"
)

// sendfileChildEnv makes the test binary run replaySendfileChild (see
// TestMain) in the directory it names: the process strace watches.
const sendfileChildEnv = "BERTH_SHARD_SENDFILE_CHILD"

// Sizes of the traced replay.
const (
	tracedMessages = 32
	tracedPayload  = 4096
)

// TestMain doubles as the entry point of the child process that
// TestReplayUsesSendfile runs under strace.
func TestMain(m *testing.M) {
	if dir := os.Getenv(sendfileChildEnv); dir != "" {
		if err := replaySendfileChild(dir); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// plainConn hides the connection's type: the shard sees neither a
// *net.TCPConn nor a NetConn method, as with TLS or WebSocket, and must
// copy stored payloads through a buffer.
type plainConn struct{ net.Conn }

// replayScenario fills a persistent session with n offline messages of
// size bytes on a WAL store in dir, then reconnects it over TCP (wrapped
// by wrap, if set) and reads them all back, checking each payload.
// ready, if set, is called just before the client reconnects.
func replayScenario(dir string, n, size int, wrap func(net.Conn) net.Conn, ready func()) error {
	st, err := store.OpenWAL(store.WALOptions{Dir: dir, Fsync: wal.SyncNever})
	if err != nil {
		return err
	}
	defer st.Close()
	sh := New(Options{Store: st, MessageLog: st.Messages(), SysInterval: -1, MaxInflight: 65535})
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = sh.Shutdown(ctx)
	}()
	if err := fillOffline(sh, "replayer", "z/#", n, size); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
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
	if ready != nil {
		ready()
	}
	return readReplay(ln.Addr().String(), "replayer", n, size)
}

// fillOffline creates an offline persistent session subscribed to filter
// and publishes n QoS 1 messages of size bytes to it.
func fillOffline(sh *Shard, clientID, filter string, n, size int) error {
	sh.mu.Lock()
	sess := sh.newSessionLocked(clientID)
	sess.expiry = neverExpires
	sh.mu.Unlock()
	if _, err := sh.tree.Subscribe(sess.id, filter, topic.Options{QoS: 1}); err != nil {
		return err
	}
	payload := bytes.Repeat([]byte{'p'}, size)
	topicName := strings.TrimSuffix(filter, "#") + "t"
	for i := range n {
		binaryPut(payload, i)
		sh.publishInternal(newSimpleMessage(topicName, append([]byte(nil), payload...), 1, false, time.Now()))
	}
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.stored.len() != n || sess.queue.len() != 0 {
		return fmt.Errorf("offline session holds %d stored, %d in memory; want %d stored", sess.stored.len(), sess.queue.len(), n)
	}
	return nil
}

// binaryPut writes i into the first 8 bytes of b, to tell messages apart.
func binaryPut(b []byte, i int) { copy(b, fmt.Sprintf("%08d", i)) }

// readReplay resumes clientID's session and reads n messages, acking them.
func readReplay(addr, clientID string, n, size int) error {
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
	rd := packet.NewReader(nc, 64<<10)
	_ = nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	var ack []byte
	for got := 0; got < n; {
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
		if want := fmt.Sprintf("%08d", got); len(p.Payload) != size || string(p.Payload[:8]) != want {
			return fmt.Errorf("message %d: %d bytes starting %q", got, len(p.Payload), p.Payload[:min(8, len(p.Payload))])
		}
		ack, _ = (&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID}).Append(ack[:0], packet.Version5)
		if _, err := nc.Write(ack); err != nil {
			return err
		}
		got++
	}
	return nil
}

func replaySendfileChild(dir string) error {
	return replayScenario(dir, tracedMessages, tracedPayload, nil, nil)
}

// TestReplayUsesSendfile proves the kernel path: a replay of stored
// messages runs in a child under strace, which must see one sendfile(2)
// per payload moving exactly the payload bytes (the headers go by writev).
func TestReplayUsesSendfile(t *testing.T) {
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Fatalf("strace is required to observe the sendfile path: %v", err)
	}
	trace := filepath.Join(t.TempDir(), "trace")
	cmd := exec.Command(strace, "-f", "-e", "trace=sendfile,writev", "-o", trace, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), sendfileChildEnv+"="+t.TempDir())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child under strace: %v\n%s", err, out)
	}
	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	calls, sent, writevs := 0, 0, 0
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.Contains(line, "sendfile("):
			calls++
			var n int
			if j := strings.LastIndex(line, "= "); j > 0 {
				_, _ = fmt.Sscan(line[j+2:], &n)
				sent += max(n, 0)
			}
		case strings.Contains(line, "writev("):
			writevs++
		}
	}
	if calls < tracedMessages || sent != tracedMessages*tracedPayload {
		t.Fatalf("strace saw %d sendfile calls moving %d bytes, want >= %d calls and %d bytes",
			calls, sent, tracedMessages, tracedMessages*tracedPayload)
	}
	if writevs == 0 {
		t.Fatal("no writev: the PUBLISH headers should go out with writev")
	}
	t.Logf("strace: %d sendfile calls moved %d payload bytes; %d writev calls", calls, sent, writevs)
}

// TestReplayWithoutSendfile: on a connection that is not a plain socket
// (TLS, WebSocket) stored payloads are copied through a pooled buffer and
// arrive intact.
func TestReplayWithoutSendfile(t *testing.T) {
	t.Parallel()
	err := replayScenario(t.TempDir(), 50, 10_000, func(c net.Conn) net.Conn { return plainConn{c} }, nil)
	if err != nil {
		t.Fatal(err)
	}
}

// BenchmarkReplay measures delivering stored messages of an offline
// session to its reconnecting client: payloads by sendfile from the log,
// by a buffered copy from the log, and (for reference) from memory.
func BenchmarkReplay(b *testing.B) {
	for _, tc := range []struct {
		name    string
		n, size int
		wrap    func(net.Conn) net.Conn
	}{
		{"sendfile/16KiB", 2000, 16 << 10, nil},
		{"copy/16KiB", 2000, 16 << 10, func(c net.Conn) net.Conn { return plainConn{c} }},
		{"sendfile/256KiB", 200, 256 << 10, nil},
		{"copy/256KiB", 200, 256 << 10, func(c net.Conn) net.Conn { return plainConn{c} }},
	} {
		n, size := tc.n, tc.size
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(n * size))
			for range b.N {
				b.StopTimer()
				if err := replayScenario(b.TempDir(), n, size, tc.wrap, b.StartTimer); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
