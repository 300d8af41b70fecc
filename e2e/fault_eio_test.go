package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"berth.dev/e2e/internal/stack"
)

// This machine's kernel has no device-mapper (no dm-error or dm-flakey
// target), so a failing disk is made with ext4's forced shutdown
// (EXT4_IOC_SHUTDOWN, what xfstests' godown does) on a loop device: after
// it every write(2) and fsync(2) on the filesystem returns EIO, as from a
// disk that died. The default flag syncs the filesystem first, so what
// was written before the failure stays on it.
const ext4IOCShutdown = 2<<30 | 4<<16 | 'X'<<8 | 125 // _IOR('X', 125, __u32)

// ext4Loop is an ext4 filesystem on a loop device over a file.
type ext4Loop struct {
	dev, dir string
}

// newExt4Loop makes an ext4 filesystem of size bytes on a loop device,
// mounts it on a fresh directory, and undoes both when the test ends.
func newExt4Loop(t *testing.T, size int64) *ext4Loop {
	t.Helper()
	tmp := t.TempDir()
	img := filepath.Join(tmp, "disk.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "-f", "--show", img).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup: %v: %s", err, out)
	}
	d := &ext4Loop{dev: strings.TrimSpace(string(out)), dir: filepath.Join(tmp, "data")}
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", d.dev).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v: %s", d.dev, err, out)
		}
	})
	if out, err := exec.Command("mkfs.ext4", "-q", d.dev).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4 %s: %v: %s", d.dev, err, out)
	}
	if err := os.Mkdir(d.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	d.mount(t)
	t.Cleanup(func() {
		if isMounted(d.dir) {
			unmount(t, d.dir)
		}
	})
	return d
}

func (d *ext4Loop) mount(t *testing.T) {
	t.Helper()
	if out, err := exec.Command("mount", "-t", "ext4", d.dev, d.dir).CombinedOutput(); err != nil {
		t.Fatalf("mount %s on %s: %v: %s", d.dev, d.dir, err, out)
	}
}

// shutdown makes every later write and fsync on the filesystem fail with
// EIO.
func (d *ext4Loop) shutdown(t *testing.T) {
	t.Helper()
	f, err := os.Open(d.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	flags := uint32(0) // EXT4_GOING_FLAGS_DEFAULT: sync, then shut down
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), ext4IOCShutdown, uintptr(unsafe.Pointer(&flags))); e != 0 {
		t.Fatalf("EXT4_IOC_SHUTDOWN on %s: %v", d.dir, e)
	}
}

// isMounted reports whether dir is a mount point.
func isMounted(dir string) bool {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[1] == dir {
			return true
		}
	}
	return false
}

// EIO from the disk on a running node (-fsync always): the node's -data
// is an ext4 filesystem on a loop device, shut down under QoS 1 load
// through the gateway, so that the log's writes and fsyncs fail with EIO.
// Publishers must be refused with 0x80 (or, for one waiting on the failed
// fsync, DISCONNECT 0x80; README "When the message log cannot take a QoS
// 1/2 message"), nothing unlogged acknowledged, and the node keeps running.
// A failed fsync is sticky until the log is reopened, so recovery is the
// operator's: the node is stopped, the filesystem mounted again (journal
// replay) and the node started; then every PUBACKed message, from before
// and after the failure, reaches the persistent subscriber. The recovery
// time is from the node's start to the first PUBACK.
func TestFaultDiskEIOOnRunningNode(t *testing.T) {
	t.Parallel()
	needRoot(t, "TestFaultDiskEIOOnRunningNode")
	disk := newExt4Loop(t, 64<<20)
	s := stack.New(t, bins, stack.Options{OpenPlans: "free,pro", NodeData: disk.dir, NodeArgs: []string{"-fsync", "always"}})
	a := s.Signup(t)
	roomForLoad(t, s, a)
	c := s.CreateCredential(t, a, []string{"fault/#"}, []string{"fault/#"}, nil)

	l := newFaultLoad(t, []string{s.Gateways[0].MQTT}, c, "fault/eio")
	l.Subscribe("eio-sub")
	l.Publish("eio-pub", 4)
	l.WaitAcked(300, 30*time.Second)

	disk.shutdown(t)
	failed := time.Now()
	ackedAtFailure := l.Acked()
	refusedBy := waitRefused(t, l, 50, 20*time.Second)
	t.Logf("disk failed (EIO) at %d acks: %v refusals within %v, %d acks after it (appends fsynced before the shutdown), %d publishes unanswered",
		ackedAtFailure, refusedBy, time.Since(failed).Round(time.Millisecond), l.Acked()-ackedAtFailure, l.errored.Load())
	for code := range refusedBy {
		if code != 0x80 {
			t.Errorf("a publish on a failed disk was refused with %#x; want 0x80 (unspecified error)", code)
		}
	}
	if s.Node.Exited() {
		t.Fatalf("the node exited on EIO\n%s", s.Node.Log())
	}

	stopErr := s.Node.Stop(10 * time.Second)
	unmount(t, disk.dir)
	disk.mount(t)
	start := time.Now()
	s.RestartNode(t)
	back := l.WaitAcked(l.Acked(), 30*time.Second)
	recovery := back.Sub(start)
	l.WaitAcked(l.Acked()+300, 30*time.Second)
	r := l.Settle(30 * time.Second)
	logFault(t, "disk EIO on a running node (ext4 on loop, forced shutdown under load, -fsync always; node stopped, filesystem remounted, node started; 1 publisher x 4 pipelined, 1 persistent subscriber, via gateway)",
		r, recovery, fmt.Sprintf(" (from the node's restart to the first PUBACK; the node's stop on the failed disk: %v)", stopErr))
	if r.refusedBy[0x80] == 0 {
		t.Errorf("no publisher was refused with 0x80 while the disk failed")
	}
}
