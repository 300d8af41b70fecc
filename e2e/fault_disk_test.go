package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"berth.dev/e2e/internal/stack"
)

// needRoot fails the test (never skips it) when it cannot mount: the disk
// fault cases give the node a real filesystem of their own, and CI runs as
// root.
func needRoot(t *testing.T, what string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("%s needs root (it mounts a filesystem of its own); run the e2e suite as root, as CI does", what)
	}
}

// mountTmpfs mounts a tmpfs of size bytes on a fresh directory and
// unmounts it when the test ends (after the processes the test starts
// later have stopped: cleanups run last-registered first).
func mountTmpfs(t *testing.T, size int64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d,mode=0755", size), "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs on %s: %v: %s", dir, err, out)
	}
	t.Cleanup(func() { unmount(t, dir) })
	return dir
}

// unmount unmounts dir, lazily if something still holds it.
func unmount(t *testing.T, dir string) {
	t.Helper()
	if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
		t.Logf("umount %s: %v: %s; unmounting lazily", dir, err, out)
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount -l %s: %v: %s", dir, err, out)
		}
	}
}

// fillDisk writes a file into dir until the filesystem refuses with
// ENOSPC, in 1 MiB writes then 4 KiB ones, at most limit bytes, and
// returns the file's path and size.
func fillDisk(t *testing.T, dir string, limit int64) (string, int64) {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var n int64
	for _, chunk := range []int{1 << 20, 4 << 10} {
		buf := make([]byte, chunk)
		for n < limit {
			w, err := f.Write(buf)
			n += int64(w)
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			if err != nil {
				t.Fatalf("fill %s: %v", path, err)
			}
		}
	}
	if n >= limit {
		t.Fatalf("wrote %d bytes into %s without filling it", n, dir)
	}
	return path, n
}

// Disk full on a running node: the node's -data is a small tmpfs; under
// QoS 1 load through the gateway (and a persistent subscriber) a file
// fills it to ENOSPC. Publishers must be refused (MQTT 5 PUBACK 0x97 for
// a full disk, per README "When the message log cannot take a QoS 1/2
// message") and stay connected, the node must keep running, and once the
// file is removed publishes must succeed again without a restart; every
// PUBACKed message reaches the subscriber. The recovery time is from the
// removal to the first PUBACK after it.
func TestFaultDiskFullOnRunningNode(t *testing.T) {
	t.Parallel()
	needRoot(t, "TestFaultDiskFullOnRunningNode")
	const size = 48 << 20
	data := mountTmpfs(t, size)
	s := stack.New(t, bins, stack.Options{OpenPlans: "free,pro", NodeData: data})
	a := s.Signup(t)
	roomForLoad(t, s, a)
	c := s.CreateCredential(t, a, []string{"fault/#"}, []string{"fault/#"}, nil)

	l := newFaultLoad(t, []string{s.Gateways[0].MQTT}, c, "fault/disk")
	l.Subscribe("disk-sub")
	l.Publish("disk-pub", 4)
	l.WaitAcked(300, 30*time.Second)

	filler, filled := fillDisk(t, data, size)
	full := time.Now()
	ackedAtFull := l.Acked()
	// Refusals, not silence: wait for a good number of them.
	refusedBy := waitRefused(t, l, 50, 20*time.Second)
	ackedWhileFull := l.Acked() - ackedAtFull
	t.Logf("disk full (%d bytes written to fill it) at %d acks: %v refusals within %v, %d acks meanwhile (appends that fit in what was left)",
		filled, ackedAtFull, refusedBy, time.Since(full).Round(time.Millisecond), ackedWhileFull)
	for code := range refusedBy {
		if code != 0x97 {
			t.Errorf("a publish on a full disk was refused with %#x; want 0x97 (quota exceeded: disk full)", code)
		}
	}
	if s.Node.Exited() {
		t.Fatalf("the node exited on a full disk\n%s", s.Node.Log())
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	back := l.WaitAcked(l.Acked(), 30*time.Second)
	recovery := back.Sub(freed)
	l.WaitAcked(l.Acked()+300, 30*time.Second) // and flowing again
	if s.Node.Exited() {
		t.Fatalf("the node exited\n%s", s.Node.Log())
	}
	r := l.Settle(30 * time.Second)
	logFault(t, fmt.Sprintf("disk full on a running node (tmpfs of %d MiB filled to ENOSPC, then freed; 1 publisher x 4 pipelined, 1 persistent subscriber, via gateway)", size>>20),
		r, recovery, " (from freeing the space to the first PUBACK, no restart)")
	if r.refusedBy[0x97] == 0 {
		t.Errorf("no publisher was refused with 0x97 while the disk was full")
	}
}

// waitRefused waits until the load has seen at least n refusals and
// returns them by reason code.
func waitRefused(t *testing.T, l *faultLoad, n int, within time.Duration) map[byte]int {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		r := l.result()
		if r.refused >= n {
			return r.refusedBy
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d refusals within %v (want %d): %v; acked %d; last error %v", r.refused, within, n, r.refusedBy, l.Acked(), l.lastErr.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
