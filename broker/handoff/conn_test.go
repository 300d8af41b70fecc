package handoff

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// pair returns a listener's accepted end and the dialled end.
func pair(t *testing.T) (node, gw *Conn, l *Listener) {
	t.Helper()
	l, err := Listen(filepath.Join(t.TempDir(), "h.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	gw, err = Dial(l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Close() })
	if node, err = l.Accept(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close() })
	return node, gw, l
}

// tcpSocket returns the client end of a loopback TCP connection.
func tcpSocket(t *testing.T) *net.TCPConn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return c.(*net.TCPConn)
}

func closeAll(fds []int) {
	for _, fd := range fds {
		syscall.Close(fd)
	}
}

// isSocket reports whether fd is an open socket.
func isSocket(fd int) bool {
	var st syscall.Stat_t
	return syscall.Fstat(fd, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFSOCK
}

// Each frame's descriptors come with that frame, also when frames with
// and without descriptors follow one another in one read's reach.
func TestDescriptorsStayWithTheirFrame(t *testing.T) {
	node, gw, _ := pair(t)
	sock := tcpSocket(t)
	if err := gw.Write(AppendID(nil, TypeClose, 1)); err != nil {
		t.Fatal(err)
	}
	if err := gw.Handoff(2, []byte("header"), sock); err != nil {
		t.Fatal(err)
	}
	if err := gw.Write(AppendID(nil, TypeClose, 3)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct {
		typ byte
		id  uint64
		fds int
	}{{TypeClose, 1, 0}, {TypeHandoff, 2, 1}, {TypeClose, 3, 0}} {
		f, err := node.ReadFrame(time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if f.Type != want.typ || len(f.FDs) != want.fds || f.Truncated {
			t.Fatalf("frame %d: type %#x with %d descriptors (truncated %v), want %#x with %d", want.id, f.Type, len(f.FDs), f.Truncated, want.typ, want.fds)
		}
		id := uint64(0)
		if f.Type == TypeHandoff {
			var hdr []byte
			id, hdr, err = ParseHandoff(f.Body)
			if string(hdr) != "header" || !isSocket(f.FDs[0]) {
				t.Fatalf("handoff: header %q, descriptor %d a socket: %v", hdr, f.FDs[0], isSocket(f.FDs[0]))
			}
		} else {
			id, err = ParseID(f.Body)
		}
		if err != nil || id != want.id {
			t.Fatalf("id %d, %v; want %d", id, err, want.id)
		}
		closeAll(f.FDs)
	}
}

// More descriptors than a read takes: the kernel drops the rest and says
// so (Truncated); a few extra are all handed to the caller to close.
func TestDescriptorBounds(t *testing.T) {
	node, gw, _ := pair(t)
	sock := tcpSocket(t)
	rc, _ := sock.SyscallConn()
	send := func(n int) {
		t.Helper()
		frame, _ := AppendHandoff(nil, uint64(n), []byte("h"))
		var werr error
		rc.Control(func(fd uintptr) {
			fds := make([]int, n)
			for i := range fds {
				fds[i] = int(fd)
			}
			_, _, werr = gw.uc.WriteMsgUnix(frame, syscall.UnixRights(fds...), nil)
		})
		if werr != nil {
			t.Fatal(werr)
		}
	}
	for _, tc := range []struct {
		sent, got int
		trunc     bool
	}{{2, 2, false}, {maxFDs, maxFDs, false}, {20, maxFDs, true}} {
		send(tc.sent)
		f, err := node.ReadFrame(time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if len(f.FDs) != tc.got || f.Truncated != tc.trunc {
			t.Errorf("sent %d descriptors: got %d, truncated %v; want %d, %v", tc.sent, len(f.FDs), f.Truncated, tc.got, tc.trunc)
		}
		closeAll(f.FDs)
	}
}

// A peer that sends part of a frame and then nothing is given up on
// after the timeout; one that sends nothing at all is waited for.
func TestSilentPeer(t *testing.T) {
	node, gw, _ := pair(t)
	if err := gw.Write([]byte{0, 0, 0, 9, TypeClose, 0}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := node.ReadFrame(100 * time.Millisecond)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("half a frame: %v, want a timeout", err)
	}
	t.Logf("half a frame given up on after %v", time.Since(start))

	node2, gw2, _ := pair(t)
	got := make(chan error, 1)
	go func() { _, err := node2.ReadFrame(50 * time.Millisecond); got <- err }()
	select {
	case err := <-got:
		t.Fatalf("an idle peer ended the read: %v", err)
	case <-time.After(300 * time.Millisecond): // idle well past the frame timeout
	}
	if err := gw2.Write(AppendID(nil, TypeClose, 1)); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("frame after idling: %v", err)
	}
}

func TestOversizedFrame(t *testing.T) {
	node, gw, _ := pair(t)
	if err := gw.Write([]byte{0, 1, 0, 1, TypeHandoff}); err != nil {
		t.Fatal(err)
	}
	if _, err := node.ReadFrame(time.Second); !errors.Is(err, ErrFrameSize) {
		t.Fatalf("%v, want ErrFrameSize", err)
	}
}

// The socket is 0600, replaces a stale file, refuses to replace a live
// one and is removed at Close.
func TestListenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "n.sock")
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close() // the file stays, nobody listens: a crashed node's
	l, err := Listen(path)
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket file: %v, %v; want mode 0600", fi.Mode(), err)
	}
	if _, err := Listen(path); err == nil {
		t.Fatal("a second listener took over a live socket")
	}
	l.Close()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("socket file after Close: %v", err)
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(path); err == nil {
		t.Fatal("replaced a regular file")
	}
}

// A peer of another user is closed before it reads a byte.
func TestPeerOfAnotherUser(t *testing.T) {
	l, err := Listen(filepath.Join(t.TempDir(), "p.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.uid, l.root = uint32(os.Getuid())+1, false // as if this process ran as someone else
	gw, err := Dial(l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	if _, err := l.Accept(); !errors.Is(err, ErrPeer) {
		t.Fatalf("accept: %v, want ErrPeer", err)
	}
	if _, err := gw.ReadFrame(time.Second); err == nil {
		t.Fatal("the refused peer read a frame")
	}
}
