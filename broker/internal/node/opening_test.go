package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"berth.dev/broker/internal/store"
	"berth.dev/broker/internal/wal"
	"berth.dev/testenv"
)

// gateFS is a node's storeFS: the real filesystem, where every open of one
// tenant's message log (its MkdirAll) waits at a gate until the test opens
// it, and the tenant's files open now are counted.
type gateFS struct {
	wal.OSFS
	tenantDir string
	entered   chan struct{} // closed when the first open reaches the gate
	gate      chan struct{}
	once      sync.Once
	release   func() // opens the gate; idempotent
	opens     atomic.Int32
	files     atomic.Int32
}

func newGateFS(dataDir, tenantID string) *gateFS {
	f := &gateFS{tenantDir: store.TenantDir(dataDir, tenantID), entered: make(chan struct{}), gate: make(chan struct{})}
	var once sync.Once
	f.release = func() { once.Do(func() { close(f.gate) }) }
	return f
}

func (f *gateFS) MkdirAll(path string, perm fs.FileMode) error {
	if path == filepath.Join(f.tenantDir, "messages") {
		f.opens.Add(1)
		f.once.Do(func() { close(f.entered) })
		<-f.gate
	}
	return f.OSFS.MkdirAll(path, perm)
}

func (f *gateFS) OpenFile(name string, flag int, perm fs.FileMode) (wal.File, error) {
	file, err := f.OSFS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasPrefix(name, f.tenantDir+string(filepath.Separator)) {
		return file, err
	}
	f.files.Add(1)
	return &countedFile{File: file, open: &f.files}, nil
}

// countedFile counts itself out of gateFS.files when closed.
type countedFile struct {
	wal.File
	open   *atomic.Int32
	closed atomic.Bool
}

func (c *countedFile) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.open.Add(-1)
	}
	return c.File.Close()
}

// OSFile keeps mmapped indexes and sendfile (wal.File).
func (c *countedFile) OSFile() *os.File { f, _ := c.File.(*os.File); return f }

// waitGate waits until an open of the gated tenant is held at the gate.
func (f *gateFS) waitGate(t *testing.T) {
	t.Helper()
	select {
	case <-f.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the tenant's open never reached its store")
	}
}

// startGated starts a node whose store holds ten_b's open at a gate.
func startGated(t *testing.T) (*testNode, *gateFS, string) {
	t.Helper()
	dir := t.TempDir()
	gate := newGateFS(dir, "ten_b")
	n := startNodeCfg(t, testenv.DatabaseURL(t), dir, true, func(c *Config) { c.storeFS = gate })
	t.Cleanup(gate.release) // before the node's shutdown, whatever happens
	return n, gate, dir
}

// connectAsync sends an MQTT 5 CONNECT on a gateway-style connection and
// reports the CONNACK's reason (or the error) on the channel it returns.
func connectAsync(t *testing.T, conn net.Conn, clientID string) <-chan error {
	t.Helper()
	res := make(chan error, 1)
	cl := paho.NewClient(paho.ClientConfig{Conn: conn})
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		ack, err := cl.Connect(ctx, &paho.Connect{ClientID: clientID, KeepAlive: 30, CleanStart: true})
		switch {
		case ack != nil && ack.ReasonCode != 0:
			res <- &connackError{ack.ReasonCode}
		default:
			res <- err
		}
	}()
	t.Cleanup(func() { _ = cl.Disconnect(&paho.Disconnect{}) })
	return res
}

type connackError struct{ reason byte }

func (e *connackError) Error() string { return fmt.Sprintf("CONNACK reason %#x", e.reason) }

// withLock runs f under n.mu, failing the test if the lock is not free
// within 5 s.
func (n *testNode) withLock(t *testing.T, f func()) {
	t.Helper()
	got := make(chan struct{})
	go func() {
		n.mu.Lock()
		f()
		n.mu.Unlock()
		close(got)
	}()
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the node's mutex was held for 5 s")
	}
}

// A tenant whose store takes long to open (a large log on a busy disk)
// stalls no other tenant: while ten_b's open is held at its store, ten_a
// opens and serves MQTT clients, and the usage flush completes; a second
// connection of ten_b waits for the same open, and both are served once it
// ends.
func TestSlowTenantOpenStallsNoOtherTenant(t *testing.T) {
	t.Parallel()
	n, gate, _ := startGated(t)
	b := cred{"ten_b", "crd_b", allowAll, 0}
	first := connectAsync(t, n.dial(t, b, nil), "b1")
	gate.waitGate(t)
	second := connectAsync(t, n.dial(t, b, nil), "b2")

	n.withLock(t, func() {}) // the open does not hold the node's mutex
	flushed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		flushed <- n.flusher.Flush(ctx)
	}()
	select {
	case err := <-flushed:
		if err != nil {
			t.Fatalf("usage flush while ten_b opens: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the usage flush stalled behind ten_b's open")
	}
	got := make(chan string, 10)
	a := cred{"ten_a", "crd_a", allowAll, 0}
	sub := n.mqtt5(t, a, "sub", got)
	subscribe(t, sub, "a/#")
	pub := n.mqtt5(t, a, "pub", nil)
	if rc := publish(t, pub, "a/1", "while ten_b opens"); rc != 0 {
		t.Fatalf("publish to ten_a: reason %#x", rc)
	}
	expectMsg(t, got, "a/1=while ten_b opens")

	select {
	case err := <-first:
		t.Fatalf("ten_b answered while its open was held: %v", err)
	case err := <-second:
		t.Fatalf("ten_b answered while its open was held: %v", err)
	default:
	}
	gate.release()
	for i, res := range []<-chan error{first, second} {
		select {
		case err := <-res:
			if err != nil {
				t.Fatalf("ten_b connection %d after its open: %v", i+1, err)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("ten_b connection %d: no CONNACK 15 s after its open was let go", i+1)
		}
	}
	if k := gate.opens.Load(); k != 1 {
		t.Fatalf("ten_b's store opened %d times for two concurrent connections, want once", k)
	}
}

// A node that begins shutting down while a tenant's store opens closes
// what that open opened: Shutdown waits for it, and no file of the tenant
// stays open.
func TestShutdownDuringATenantOpen(t *testing.T) {
	t.Parallel()
	n, gate, _ := startGated(t)
	res := connectAsync(t, n.dial(t, cred{"ten_b", "crd_b", allowAll, 0}, nil), "b1")
	gate.waitGate(t)
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		shut <- n.Shutdown(ctx)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for closing := false; !closing; {
		n.withLock(t, func() { closing = n.closing })
		if time.Now().After(deadline) {
			t.Fatal("the node did not begin shutting down")
		}
		time.Sleep(5 * time.Millisecond)
	}
	gate.release()
	select {
	case err := <-shut:
		if err != nil {
			t.Fatalf("shutdown: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("shutdown did not return")
	}
	if k := gate.files.Load(); k != 0 || gate.opens.Load() != 1 {
		t.Fatalf("%d files of ten_b open after the shutdown (store opened %d times), want none", k, gate.opens.Load())
	}
	n.withLock(t, func() {
		if _, ok := n.tenants["ten_b"]; ok || len(n.opening) != 0 {
			t.Errorf("after the shutdown: ten_b open %v, opens under way %d", ok, len(n.opening))
		}
	})
	if err := <-res; err == nil {
		t.Fatal("ten_b's connection was served by a node that had shut down")
	}
}

// A tenant deleted while its store opens is not served: the open closes
// what it opened, the connection is refused (CONNACK 0x87), and the
// tenant's directory is erased only after, so it stays erased.
func TestDeletionDuringATenantOpen(t *testing.T) {
	t.Parallel()
	n, gate, _ := startGated(t)
	res := connectAsync(t, n.dial(t, cred{"ten_b", "crd_b", allowAll, 0}, nil), "b1")
	gate.waitGate(t)
	deleted := make(chan struct{})
	go func() { n.deleteTenant("ten_b"); close(deleted) }()
	deadline := time.Now().Add(10 * time.Second)
	for seen := false; !seen; {
		n.withLock(t, func() { _, seen = n.deleted["ten_b"] })
		if time.Now().After(deadline) {
			t.Fatal("the deletion did not begin")
		}
		time.Sleep(5 * time.Millisecond)
	}
	gate.release()
	select {
	case <-deleted:
	case <-time.After(20 * time.Second):
		t.Fatal("the deletion did not finish")
	}
	select {
	case err := <-res:
		var ce *connackError
		if !errors.As(err, &ce) || ce.reason != 0x87 {
			t.Fatalf("ten_b's connection: %v, want CONNACK 0x87", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("ten_b's connection: no CONNACK")
	}
	if k := gate.files.Load(); k != 0 {
		t.Fatalf("%d files of ten_b open after its deletion, want none", k)
	}
	if _, err := os.Stat(gate.tenantDir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ten_b's directory after its deletion: %v, want it gone", err)
	}
}
