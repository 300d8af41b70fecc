package node

import (
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/google/go-cmp/cmp"

	"berth.dev/broker/internal/replica"
	"berth.dev/broker/internal/store"
	"berth.dev/broker/internal/wal"
)

// orderFS is a node's removalFS: the real filesystem, with a record of
// every remove and directory fsync (paths relative to the node's data
// directory), each with what probe says of the disk and the group at
// that moment.
type orderFS struct {
	wal.OSFS
	root string

	mu    sync.Mutex
	ops   []string
	probe func() string
}

func (f *orderFS) note(op, path string) {
	rel, err := filepath.Rel(f.root, path)
	if err != nil {
		rel = path
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s := op + " " + rel
	if f.probe != nil {
		s += " " + f.probe()
	}
	f.ops = append(f.ops, s)
}

func (f *orderFS) setProbe(p func() string) {
	f.mu.Lock()
	f.probe = p
	f.mu.Unlock()
}

func (f *orderFS) recorded() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.ops)
}

func (f *orderFS) Remove(name string) error {
	err := os.Remove(name)
	if err == nil {
		f.note("remove", name)
	}
	return err
}

func (f *orderFS) OpenFile(name string, flag int, perm fs.FileMode) (wal.File, error) {
	of, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	if st, err := of.Stat(); err == nil && st.IsDir() {
		return &syncNoted{File: of, fs: f, name: name}, nil
	}
	return of, nil
}

// syncNoted is a directory opened through orderFS: its fsync is recorded
// once it returned.
type syncNoted struct {
	*os.File
	fs   *orderFS
	name string
}

func (d *syncNoted) Sync() error {
	err := d.File.Sync()
	if err == nil {
		d.fs.note("sync", d.name)
	}
	return err
}

// pinUndeletable makes a file under dir that no os.RemoveAll can delete,
// so that dir cannot be deleted either, until unpin: as root (as in CI)
// the file is made immutable (chattr +i, e2fsprogs: infra/dev/tools.sh);
// as another user its directory is made read-only.
func pinUndeletable(t *testing.T, dir string) (unpin func()) {
	t.Helper()
	pinned := filepath.Join(dir, "pinned")
	keep := filepath.Join(pinned, "keep")
	if err := os.MkdirAll(pinned, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keep, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	if os.Geteuid() == 0 {
		if out, err := exec.Command("chattr", "+i", keep).CombinedOutput(); err != nil {
			t.Fatalf("chattr +i (needs e2fsprogs, a filesystem with attributes and CAP_LINUX_IMMUTABLE): %v: %s", err, out)
		}
		unpin = func() {
			once.Do(func() {
				if out, err := exec.Command("chattr", "-i", keep).CombinedOutput(); err != nil {
					t.Errorf("chattr -i: %v: %s", err, out)
				}
			})
		}
	} else {
		if err := os.Chmod(pinned, 0o500); err != nil {
			t.Fatal(err)
		}
		unpin = func() {
			once.Do(func() {
				if err := os.Chmod(pinned, 0o700); err != nil {
					t.Error(err)
				}
			})
		}
	}
	t.Cleanup(unpin) // before t.TempDir's removal: cleanups run last first
	if err := os.RemoveAll(dir); err == nil {
		t.Fatal("the pinned directory could be deleted")
	}
	return unpin
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// TestReaddedReplicaWaitsForItsCopyDeleted: three nodes, a pro tenant with
// a retained message. One follower's raft log directory holds a file no
// deletion can remove (an immutable file: a disk fault as the node sees
// it). Moved to free, the group removes that follower: it tombstones the
// group, its deletion fails and part of the copy stays
// (berth_raft_removed_copy_errors_total counts it). Moved back to pro, its
// leader adds the follower back and keeps asking it; while the leftovers
// cannot be deleted, the follower refuses every time (the counter grows)
// and stays tombstoned with no group open: it never opens on what is left
// of its old log (before the fix it removed the tombstone and opened the
// group on the leftovers at the first ask). Once the file can go, the
// next ask deletes the leftovers, the deletions are fsynced, the tombstone
// is removed and its directory fsynced, in that order (watched through the
// node's filesystem), and only then does the group open: it is caught up
// by snapshot, votes again, and serves the retained message as leader.
func TestReaddedReplicaWaitsForItsCopyDeleted(t *testing.T) {
	t.Parallel()
	fss := map[string]*orderFS{}
	c := startCluster(t, func(cfg *Config) {
		f := &orderFS{root: cfg.DataDir}
		fss[cfg.ID] = f
		cfg.removalFS = f
	})
	const tenant = replTenant
	gid := replica.NameID(tenant)
	cr := cred{tenant: tenant, id: "cred_readd", acl: allowAll}
	lead := c.leader(t, tenant, nil)
	poll(t, 10*time.Second, "three voters", func() bool { return len(c.voterNodes(tenant)) == 3 })
	keep := lead.repl.ranked(tenant, 1, nil)[0].id
	var victim *testNode // removed by the downgrade, and not the leader
	for _, n := range c.nodes {
		if n.cfg.ID != keep && n != lead {
			victim = n
			break
		}
	}
	raftDir := filepath.Join(victim.cfg.DataDir, "raft", strconv.FormatUint(gid, 10))
	storeDir := store.TenantDir(victim.cfg.DataDir, tenant)
	tomb := victim.repl.tombstone(gid)
	isOpen := func() bool {
		victim.repl.mu.Lock()
		rg := victim.repl.groups[tenant]
		victim.repl.mu.Unlock()
		return rg != nil || victim.repl.host.Group(gid) != nil
	}
	fss[victim.cfg.ID].setProbe(func() string {
		return fmt.Sprintf("[raft:%t store:%t tombstone:%t open:%t]", exists(raftDir), exists(storeDir), exists(tomb), isOpen())
	})
	copyErrors := func() float64 { return metricValue(scrapeMetrics(t, victim), "berth_raft_removed_copy_errors_total") }

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pub := lead.mqtt5(t, cr, "pub", nil)
	if r, err := pub.Publish(ctx, &paho.Publish{Topic: "r/1", QoS: 1, Retain: true, Payload: []byte("before")}); err != nil || r.ReasonCode >= 0x80 {
		t.Fatalf("retained publish: %v %v", r, err)
	}
	unpin := pinUndeletable(t, filepath.Join(raftDir, "log"))

	setPlanNotify(t, lead, tenant, "free")
	poll(t, 20*time.Second, victim.cfg.ID+" removed, tombstoned, its deletion failed", func() bool {
		return len(c.voterNodes(tenant)) == 1 && exists(tomb) && !isOpen() && copyErrors() >= 1
	})
	if !exists(filepath.Join(raftDir, "log", "pinned")) {
		t.Fatal("the pinned leftovers are gone")
	}
	before := copyErrors()
	t.Logf("pro → free: %s tombstoned with its raft directory left (%v copy errors)", victim.cfg.ID, before)

	setPlanNotify(t, lead, tenant, "pro")
	poll(t, 20*time.Second, "two re-additions refused while the leftovers stay", func() bool {
		if isOpen() || !exists(tomb) {
			t.Fatalf("%s opened the group on its old copy's leftovers (tombstone there: %t)", victim.cfg.ID, exists(tomb))
		}
		return copyErrors() >= before+2
	})
	if isOpen() || !exists(tomb) || !exists(filepath.Join(raftDir, "log", "pinned")) {
		t.Fatal("after refused re-additions: the group is open, or the tombstone or the leftovers went")
	}
	n := len(fss[victim.cfg.ID].recorded())

	unpin()
	start := time.Now()
	poll(t, 30*time.Second, victim.cfg.ID+" votes again", func() bool { return slices.Contains(c.voterNodes(tenant), victim.cfg.ID) })
	t.Logf("leftovers deletable → %s votes again after %v", victim.cfg.ID, time.Since(start).Round(time.Millisecond))
	if exists(tomb) || exists(filepath.Join(raftDir, "log", "pinned")) {
		t.Fatal("the member votes again, but its tombstone or the old leftovers are still there")
	}
	want := []string{
		"sync raft [raft:false store:false tombstone:true open:false]",
		"sync . [raft:false store:false tombstone:true open:false]",
		"remove raft/removed/" + strconv.FormatUint(gid, 10) + " [raft:false store:false tombstone:false open:false]",
		"sync raft/removed [raft:false store:false tombstone:false open:false]",
	}
	if diff := cmp.Diff(want, fss[victim.cfg.ID].recorded()[n:]); diff != "" {
		t.Fatalf("the re-addition's removes and fsyncs (-want +got):\n%s", diff)
	}

	poll(t, 10*time.Second, victim.cfg.ID+" ready", func() bool {
		code, _, _ := getReadyz(t, victim)
		return code == http.StatusOK
	})
	if err := c.leader(t, tenant, nil).groupOf(t, tenant).g.TransferLeadership(victim.repl.self); err != nil {
		t.Fatal(err)
	}
	poll(t, 10*time.Second, "the leadership on "+victim.cfg.ID, func() bool {
		_, err := victim.repl.serving(tenant)
		return err == nil
	})
	got := make(chan string, 4)
	sub := victim.mqtt5(t, cr, "sub", got)
	if rc := subscribe(t, sub, "r/#"); rc >= 0x80 {
		t.Fatalf("subscribe on the re-added member: %#x", rc)
	}
	expectMsg(t, got, "r/1=before")
}
