package replica

import (
	"encoding/binary"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// halfSnapshot dials node to's peer listener as node from (the cluster
// secret: a real peer's handshake) and sends a snapshot stream's begin
// frame and one chunk for testGroup, never the end frame.
func (c *cluster) halfSnapshot(t *testing.T, from, to uint64) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", c.addrs[to])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	key, err := clientHandshake(conn, c.secret, from, to)
	if err != nil {
		t.Fatal(err)
	}
	fw := newFrameWriter(conn, key)
	chunk := binary.BigEndian.AppendUint16(nil, uint16(len("messages/00000000.seg")))
	chunk = append(chunk, "messages/00000000.seg"...)
	chunk = binary.BigEndian.AppendUint64(chunk, 0)
	chunk = append(chunk, "half a segment"...)
	if _, err := fw.write(kindSnapBegin, testGroup, binary.BigEndian.AppendUint64(nil, 1000)); err != nil {
		t.Fatal(err)
	}
	if _, err := fw.write(kindSnapChunk, testGroup, chunk); err != nil {
		t.Fatal(err)
	}
	if err := fw.flush(); err != nil {
		t.Fatal(err)
	}
	return conn
}

// receiving lists the snapshot directories being received under dir and
// the files of this process open below it.
func receiving(t *testing.T, dir string) (tmp []string, open []string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".tmp") {
			tmp = append(tmp, e.Name())
		}
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && strings.HasPrefix(target, dir+string(filepath.Separator)) {
			open = append(open, target)
		}
	}
	return tmp, open
}

// TestHalfReceivedSnapshotCleanedUp: a snapshot stream that dies before
// its end frame leaves no open file and no temporary directory behind,
// whether the connection drops (the sender died) or the host closes while
// it is still open.
func TestHalfReceivedSnapshotCleanedUp(t *testing.T) {
	c := newCluster(t, 2, nil)
	dir := inDir(c.host(1).groupDir(testGroup))
	const started = "the stream to begin (a .tmp directory with an open file)"

	conn := c.halfSnapshot(t, 2, 1)
	waitFor(t, 5*time.Second, started, func() bool {
		tmp, open := receiving(t, dir)
		return len(tmp) == 1 && len(open) == 1
	})
	conn.Close()
	waitFor(t, 5*time.Second, "the dropped stream's directory and file to go", func() bool {
		tmp, open := receiving(t, dir)
		return len(tmp) == 0 && len(open) == 0
	})

	c.halfSnapshot(t, 2, 1)
	waitFor(t, 5*time.Second, started, func() bool {
		tmp, open := receiving(t, dir)
		return len(tmp) == 1 && len(open) == 1
	})
	c.kill(1)
	if tmp, open := receiving(t, dir); len(tmp) != 0 || len(open) != 0 {
		t.Fatalf("after Host.Close: %d directories being received %v, files open %v", len(tmp), tmp, open)
	}
}
