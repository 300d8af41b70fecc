package wal

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const sendfileChildEnv = "BERTH_WAL_SENDFILE_CHILD"

// tcpPair returns both ends of a real loopback TCP connection.
func tcpPair(tb testing.TB) (client, server *net.TCPConn) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		tb.Fatal("accept failed")
	}
	tb.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// replay sends every record's payload from off onwards to w, from the
// segment files (a Sender when w is a TCP connection), and returns how many
// records it sent.
func replay(l *Log, off uint64, w io.Writer) (int, error) {
	send := func(loc Location) error { _, err := SendPayload(w, loc); return err }
	if c, ok := w.(*net.TCPConn); ok {
		s, err := NewSender(c)
		if err != nil {
			return 0, err
		}
		send = func(loc Location) error {
			_, err := s.Send(loc.File, loc.PayloadPos(), int(loc.PayloadSize))
			return err
		}
	}
	r, err := l.ReadFrom(off)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	n := 0
	for {
		loc, err := r.NextLocation()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		if err := send(loc); err != nil {
			return n, err
		}
		n++
	}
}

// sendAndCheck replays l over a real TCP loopback pair and compares what
// arrives with the expected payloads.
func sendAndCheck(l *Log, exp []want) error {
	var expected bytes.Buffer
	for _, w := range exp {
		expected.WriteString(w.payload)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c)
		got <- b
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return err
	}
	n, err := replay(l, 0, c)
	c.Close()
	if err != nil {
		return err
	}
	if n != len(exp) {
		return fmt.Errorf("replayed %d records, want %d", n, len(exp))
	}
	if b := <-got; !bytes.Equal(b, expected.Bytes()) {
		return fmt.Errorf("received %d bytes that differ from the %d expected", len(b), expected.Len())
	}
	return nil
}

func TestSendfileLoopback(t *testing.T) {
	l := openLog(t, Options{SegmentBytes: 1 << 20, Fsync: SyncNever})
	exp := appendN(t, l, 200, 1000)
	// Bigger than a socket buffer: the sender must park on EAGAIN and resume.
	big, err := l.Append([]byte("big"), payloadFor(7, 8<<20), 1)
	if err != nil {
		t.Fatal(err)
	}
	exp = append(exp, want{big, 1, "big", string(payloadFor(7, 8<<20))})
	exp = append(exp, appendN(t, l, 50, 64)...)
	if err := sendAndCheck(l, exp); err != nil {
		t.Fatal(err)
	}
}

func TestSendfileExplicitOffset(t *testing.T) {
	client, server := tcpPair(t)
	f, err := os.CreateTemp(t.TempDir(), "src")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.WriteString("0123456789abcdef")
	if _, err := f.Seek(3, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	n, err := Sendfile(client, f, 10, 6)
	if err != nil || n != 6 {
		t.Fatalf("Sendfile = %d, %v", n, err)
	}
	buf := make([]byte, 6)
	if _, err := io.ReadFull(server, buf); err != nil || string(buf) != "abcdef" {
		t.Fatalf("received %q, %v", buf, err)
	}
	if pos, _ := f.Seek(0, io.SeekCurrent); pos != 3 {
		t.Fatalf("Sendfile moved the file position to %d", pos)
	}
	if _, err := Sendfile(client, f, 10, 100); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("Sendfile past the end of the file = %v, want io.ErrUnexpectedEOF", err)
	}
}

// TestSenderAllocs pins the per-message sendfile path to zero allocations.
func TestSenderAllocs(t *testing.T) {
	client, server := tcpPair(t)
	go io.Copy(io.Discard, server)
	l := openLog(t, Options{Fsync: SyncNever})
	appendN(t, l, 1, 512)
	loc, err := l.Locate(0)
	if err != nil {
		t.Fatal(err)
	}
	defer loc.Release()
	s, err := NewSender(client)
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(500, func() {
		if _, err := s.Send(loc.File, loc.PayloadPos(), int(loc.PayloadSize)); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("Sender.Send allocates %.1f times per call, want 0", n)
	}
}

func TestSendRangeFallback(t *testing.T) {
	l := openLog(t, Options{Fsync: SyncNever})
	exp := appendN(t, l, 20, 100<<10) // payloads bigger than the 64 KiB copy buffer
	var buf bytes.Buffer              // not a socket: the pooled-buffer path
	n, err := replay(l, 0, &buf)
	if err != nil || n != len(exp) {
		t.Fatalf("replay = %d, %v", n, err)
	}
	var expected bytes.Buffer
	for _, w := range exp {
		expected.WriteString(w.payload)
	}
	if !bytes.Equal(buf.Bytes(), expected.Bytes()) {
		t.Fatal("buffered replay delivered different bytes")
	}
}

// sendfileChild is the process TestSendfileUnderStrace traces (TestMain runs
// it when sendfileChildEnv is set). It replays a log over loopback TCP.
func sendfileChild() int {
	dir, err := os.MkdirTemp("", "wal-sendfile-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer os.RemoveAll(dir)
	l, err := Open(Options{Dir: dir, Fsync: SyncNever})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer l.Close()
	var exp []want
	for i := range 32 {
		p := payloadFor(i, 4096)
		off, err := l.Append(nil, p, 1)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		exp = append(exp, want{off, 1, "", string(p)})
	}
	if err := sendAndCheck(l, exp); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// TestSendfileUnderStrace proves the replay path really uses sendfile(2):
// it runs a replay in a child under strace and counts the syscalls.
func TestSendfileUnderStrace(t *testing.T) {
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("strace is not installed, so the sendfile syscalls cannot be observed; install it (apt-get install -y strace) to run this test")
	}
	trace := filepath.Join(t.TempDir(), "trace")
	cmd := exec.Command(strace, "-f", "-e", "trace=sendfile", "-o", trace, os.Args[0])
	cmd.Env = append(os.Environ(), sendfileChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child under strace: %v\n%s", err, out)
	}
	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	calls, bytesSent := 0, 0
	for _, line := range strings.Split(string(b), "\n") {
		i := strings.Index(line, "sendfile(")
		if i < 0 {
			continue
		}
		calls++
		var n int
		if j := strings.LastIndex(line, "= "); j > 0 {
			fmt.Sscan(line[j+2:], &n)
			bytesSent += max(n, 0)
		}
	}
	if calls < 32 || bytesSent != 32*4096 {
		t.Fatalf("strace saw %d sendfile calls moving %d bytes, want >= 32 calls and %d bytes\n%s", calls, bytesSent, 32*4096, b)
	}
	t.Logf("strace: %d sendfile calls, %d bytes from file to socket", calls, bytesSent)
}
