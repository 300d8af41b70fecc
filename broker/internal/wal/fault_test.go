package wal

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestShortWrite: a write that fails half way is cut off again, the caller
// gets the error, and the log goes on with nothing torn on disk.
func TestShortWrite(t *testing.T) {
	fsys := newFaultFS()
	dir := t.TempDir()
	l := openLog(t, Options{Dir: dir, FS: fsys})
	exp := appendN(t, l, 3, 50)
	fsys.setShortWrites(1)
	if _, err := l.Append([]byte("doomed"), make([]byte, 500), 1); !errors.Is(err, errInjected) {
		t.Fatalf("Append during a short write = %v, want the injected error", err)
	}
	if got := l.NextOffset(); got != 3 {
		t.Fatalf("NextOffset after a failed append = %d, want 3", got)
	}
	fsys.setShortWrites(1)
	if _, err := l.AppendBatch([]Entry{{Payload: []byte("a"), Count: 1}, {Payload: []byte("b"), Count: 1}}); !errors.Is(err, errInjected) {
		t.Fatalf("AppendBatch during a short write = %v", err)
	}
	exp = append(exp, appendN(t, l, 2, 50)...)
	exp[3].key, exp[4].key = "key-0", "key-1"
	exp[3].off, exp[4].off = 3, 4
	checkRecords(t, l, 0, exp)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2 := openLog(t, Options{Dir: dir})
	checkRecords(t, l2, 0, exp)
}

// TestShortWriteUnrepairable: when the partial record cannot be cut off
// either, the log refuses further appends; reopening truncates the torn tail.
func TestShortWriteUnrepairable(t *testing.T) {
	fsys := newFaultFS()
	dir := t.TempDir()
	l := openLog(t, Options{Dir: dir, FS: fsys})
	exp := appendN(t, l, 2, 50)
	fsys.setShortWrites(1)
	fsys.setTruncErr(errInjected)
	if _, err := l.Append(nil, make([]byte, 400), 1); !errors.Is(err, errInjected) {
		t.Fatalf("Append = %v", err)
	}
	if _, err := l.Append(nil, []byte("next"), 1); err == nil {
		t.Fatal("Append after an unrepairable write succeeded")
	}
	l.Close()
	l2 := openLog(t, Options{Dir: dir})
	checkRecords(t, l2, 0, exp)
}

// TestFsyncErrorIsSticky: when fsync fails, every waiter gets the error,
// nothing is reported durable, and appends are refused from then on.
func TestFsyncErrorIsSticky(t *testing.T) {
	fsys := newFaultFS()
	l := openLog(t, Options{FS: fsys, Fsync: SyncAlways})
	if _, err := l.AppendSync(nil, []byte("durable"), 1); err != nil {
		t.Fatal(err)
	}
	durable := l.Durable()
	if durable != 1 {
		t.Fatalf("Durable = %d, want 1", durable)
	}
	fsys.setSyncErr(errInjected)
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = l.AppendSync(nil, []byte(fmt.Sprint(i)), 1)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, errInjected) {
			t.Errorf("waiter %d got %v, want the fsync error", i, err)
		}
	}
	if got := l.Durable(); got != durable {
		t.Fatalf("Durable moved from %d to %d despite fsync errors", durable, got)
	}
	fsys.setSyncErr(nil) // even a healthy disk now: the error stays
	if _, err := l.Append(nil, []byte("after"), 1); !errors.Is(err, errInjected) {
		t.Fatalf("Append after a failed fsync = %v, want the sticky error", err)
	}
	if err := l.WaitDurable(0); err != nil {
		t.Fatalf("WaitDurable(0) for a record made durable before the failure = %v", err)
	}
	if err := l.Close(); !errors.Is(err, errInjected) {
		t.Fatalf("Close = %v, want the sticky error", err)
	}
}

// TestGroupCommit: concurrent AppendSync callers share fsyncs. The first
// fsync is held until every appender has written; the next fsync then
// covers all of them.
func TestGroupCommit(t *testing.T) {
	fsys := newFaultFS()
	l := openLog(t, Options{FS: fsys, Fsync: SyncAlways})
	const n = 16
	release := make(chan struct{})
	var once sync.Once
	fsys.setOnSync(func() { once.Do(func() { <-release }) })
	before := fsys.syncs.Load()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := l.AppendSync([]byte("k"), []byte(fmt.Sprint(i)), 1); err != nil {
				errs <- err
			}
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for l.NextOffset() < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d appends happened", l.NextOffset(), n)
		}
		time.Sleep(time.Millisecond) // polling the appenders' progress, bounded by deadline
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := fsys.syncs.Load() - before; got > 2 {
		t.Fatalf("%d appenders needed %d fsyncs, want at most 2 (group commit)", n, got)
	}
	if got := l.Durable(); got != n {
		t.Fatalf("Durable = %d, want %d", got, n)
	}
}

// TestIntervalPolicy: the background goroutine makes records durable
// without anyone waiting, and Close stops it.
func TestIntervalPolicy(t *testing.T) {
	fsys := newFaultFS()
	l := openLog(t, Options{FS: fsys, Fsync: SyncInterval, FsyncInterval: 5 * time.Millisecond})
	off, err := l.AppendSync(nil, []byte("x"), 1)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for l.Durable() <= off {
		if time.Now().After(deadline) {
			t.Fatal("the interval fsync never ran")
		}
		time.Sleep(time.Millisecond)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.done:
	default:
		t.Fatal("the fsync goroutine is still running after Close")
	}
}

// TestRollFsyncError: a failed fsync while sealing a segment is sticky too.
func TestRollFsyncError(t *testing.T) {
	fsys := newFaultFS()
	l := openLog(t, Options{FS: fsys, SegmentBytes: 200, Fsync: SyncNever})
	appendN(t, l, 1, 100)
	fsys.setSyncErr(errInjected)
	if _, err := l.Append(nil, make([]byte, 100), 1); !errors.Is(err, errInjected) {
		t.Fatalf("Append that rolls with a failing fsync = %v", err)
	}
	if err := l.WaitDurable(0); !errors.Is(err, errInjected) {
		t.Fatalf("WaitDurable = %v, want the sticky error", err)
	}
}
