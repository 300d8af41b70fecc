package shard

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"berth.dev/broker/internal/store"
	"berth.dev/broker/internal/wal"
	"berth.dev/broker/packet"
)

// cutFS is the operating system's filesystem remembering, for each
// message-log segment, its size at its last successful fsync (or when it
// was first opened), so that cut can copy a log directory as a power cut
// would leave it: what was written but not fsynced is gone. While
// failSync is set every segment fsync fails with EIO.
type cutFS struct {
	wal.OSFS
	failSync atomic.Bool
	mu       sync.Mutex
	synced   map[string]int64
}

func (c *cutFS) OpenFile(name string, flag int, perm fs.FileMode) (wal.File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil || !strings.HasSuffix(name, wal.SegmentSuffix) {
		return f, err
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	c.mu.Lock()
	if c.synced == nil {
		c.synced = make(map[string]int64)
	}
	if _, seen := c.synced[name]; !seen {
		c.synced[name] = fi.Size() // on disk before this process
	}
	c.mu.Unlock()
	return &cutFile{File: f, fs: c}, nil
}

type cutFile struct {
	*os.File
	fs *cutFS
}

// OSFile keeps mmapped indexes and sendfile working on the wrapped file.
func (f *cutFile) OSFile() *os.File { return f.File }

func (f *cutFile) Sync() error {
	if f.fs.failSync.Load() {
		return &fs.PathError{Op: "fsync", Path: f.Name(), Err: syscall.EIO}
	}
	fi, err := f.File.Stat() // what the fsync covers, at least
	if err != nil {
		return err
	}
	if err := f.File.Sync(); err != nil {
		return err
	}
	f.fs.mu.Lock()
	f.fs.synced[f.Name()] = max(f.fs.synced[f.Name()], fi.Size())
	f.fs.mu.Unlock()
	return nil
}

// cut copies the log directory src to a new directory as a power cut
// leaves it: each segment cut to its fsynced size; other files (written
// whole and fsynced) as they are.
func (c *cutFS) cut(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			t.Fatalf("unexpected directory %s in a log", e.Name())
		}
		limit := int64(-1)
		if strings.HasSuffix(e.Name(), wal.SegmentSuffix) {
			c.mu.Lock()
			limit = c.synced[filepath.Join(src, e.Name())]
			c.mu.Unlock()
		}
		copyFile(t, filepath.Join(src, e.Name()), filepath.Join(dst, e.Name()), limit)
	}
	return dst
}

// copyFile copies src to dst, its first limit bytes when limit >= 0.
func copyFile(t *testing.T, src, dst string, limit int64) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	var r io.Reader = in
	if limit >= 0 {
		r = io.LimitReader(in, limit)
	}
	if _, err := io.Copy(out, r); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// copyTree copies the directory src (a store's, every write of which was
// fsynced) to a new directory.
func copyTree(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		copyFile(t, path, filepath.Join(dst, rel), -1)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// powerCutNode is one life of a standalone node with -fsync always: its
// sessions in a WAL store, its message log on a cutFS. Checkpoints are
// off (an hour apart), so session records change only when the shard
// saves them on its own (SUBSCRIBE, disconnect, recovery).
type powerCutNode struct {
	fs            *cutFS
	logDir, stDir string
	log           *wal.Log
	st            *store.WAL
	b             *testBroker
}

func startPowerCutNode(t *testing.T, logDir, stDir string) *powerCutNode {
	t.Helper()
	n := &powerCutNode{fs: &cutFS{}, logDir: logDir, stDir: stDir}
	n.st = openWALStore(t, stDir, wal.SyncAlways)
	var err error
	n.log, err = wal.Open(wal.Options{Dir: logDir, Fsync: wal.SyncAlways, FS: n.fs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.log.Close() })
	n.b = startBrokerWith(t, New(Options{Store: n.st, MessageLog: n.log, SysInterval: -1, CheckpointInterval: time.Hour}))
	return n
}

// cut returns the directories the node's power cut leaves. The node
// must be idle; it is left running until the test ends.
func (n *powerCutNode) cut(t *testing.T) (logDir, stDir string) {
	t.Helper()
	return n.fs.cut(t, n.logDir), copyTree(t, n.stDir)
}

// TestCursorClampedAfterPowerCut: -fsync always. A session that
// subscribes while a message's fsync has failed saves a cursor past that
// message, which a power cut then takes away: on recovery the cursor
// points past the log's end, and the next messages get the offsets below
// it. The shard moves the cursor down to the log's end and saves it at
// once, so that after a second power cut the message published in
// between (acknowledged, fsynced) still reaches the session. Before the
// fix the rebuild after the second cut skipped it. A session from before
// gets every acknowledged message once and the unacknowledged one never.
func TestCursorClampedAfterPowerCut(t *testing.T) {
	t.Parallel()
	a := startPowerCutNode(t, t.TempDir(), t.TempDir())
	keeper, _ := persistentSub(t, a.b.addr, "keeper", "disk/#", 1)
	keeper.send(&packet.Disconnect{})
	pub := v5Client(t, a.b, "pub")
	for i := range 3 {
		if code := publishQoS(pub, 1, uint16(i+1), i); code.IsFailure() {
			t.Fatalf("PUBACK %d: %v", i, code)
		}
	}
	a.fs.failSync.Store(true)
	pub.send(&packet.Publish{QoS: 1, PacketID: 9, Topic: []byte("disk/t"), Payload: []byte("lost")})
	if r := readUntilClosed(t, pub, "-"); r != packet.ErrUnspecified {
		t.Fatalf("publisher: DISCONNECT %v, want 0x80", r)
	}
	late, _ := persistentSub(t, a.b.addr, "late", "disk/#", 1) // its cursor: past "lost"
	late.send(&packet.Disconnect{})
	eventually(t, "both subscribers offline", func() bool {
		k, _ := a.b.shard.SessionStats("keeper")
		l, _ := a.b.shard.SessionStats("late")
		return !k.Connected && !l.Connected
	})

	// First power cut: "lost" was never fsynced.
	logDir, stDir := a.cut(t)
	st := openWALStore(t, stDir, wal.SyncAlways)
	var saved uint64
	if err := st.Sessions(func(ss *store.Session) bool {
		if ss.ClientID == "late" {
			saved = ss.Cursor
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	b := startPowerCutNode(t, logDir, stDir)
	end := b.log.NextOffset()
	t.Logf("after the first cut: log end %d, late's saved cursor %d", end, saved)
	if end != 3 || saved <= end {
		t.Fatalf("the power cut left log end %d and cursor %d; want 3 and past it", end, saved)
	}
	pub = v5Client(t, b.b, "pub")
	if code := publishQoS(pub, 1, 1, 3); code.IsFailure() { // offset 3, where "lost" was
		t.Fatalf("PUBACK 3: %v", code)
	}

	// Second power cut: everything was fsynced.
	logDir, stDir = b.cut(t)
	c := startPowerCutNode(t, logDir, stDir)
	marker := v5Client(t, c.b, "marker")
	for _, tc := range []struct {
		id   string
		want []string
	}{
		{"keeper", []string{"0", "1", "2", "3"}},
		{"late", []string{"3"}},
	} {
		sub, ack := persistentSub(t, c.b.addr, tc.id, "", 0)
		if !ack.SessionPresent {
			t.Fatalf("%s: session lost", tc.id)
		}
		// A QoS 0 message (never logged) comes after the stored ones.
		marker.send(&packet.Publish{Topic: []byte("disk/t"), Payload: []byte("end")})
		got := receive(t, sub, "end")
		if got["lost"] != 0 {
			t.Errorf("%s got the message that was never acknowledged: %v", tc.id, got)
		}
		for _, p := range tc.want {
			if got[p] != 1 {
				t.Errorf("%s got %v; want each of %v once", tc.id, got, tc.want)
				break
			}
		}
		if len(got) != len(tc.want)+1 {
			t.Errorf("%s got %v; want %v and the marker", tc.id, got, tc.want)
		}
	}
}
