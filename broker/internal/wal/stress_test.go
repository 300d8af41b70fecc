package wal

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
)

// TestConcurrentMaintenance runs appenders, readers, retention and
// compaction at once (run it with -race). Readers must never see damage or
// offsets going backwards.
func TestConcurrentMaintenance(t *testing.T) {
	l := openLog(t, Options{SegmentBytes: 2048, IndexInterval: 256, Fsync: SyncNever,
		Retention: Retention{Bytes: 16 << 10}, Logger: quietLogger()})
	const appends = 1500
	var done atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range appends {
				if _, err := l.Append([]byte(fmt.Sprintf("k%d", (w*7+i)%20)), payloadFor(i, 40), 1); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var maint sync.WaitGroup
	maint.Add(1)
	go func() {
		defer maint.Done()
		for !done.Load() {
			if _, err := l.ApplyRetention(); err != nil {
				errs <- err
				return
			}
			if _, err := l.Compact(); err != nil {
				errs <- err
				return
			}
		}
	}()
	var reads atomic.Int64
	for range 2 {
		maint.Add(1)
		go func() {
			defer maint.Done()
			for !done.Load() {
				r, err := l.ReadFrom(l.FirstOffset())
				if errors.Is(err, ErrOutOfRange) {
					continue // retention moved the start meanwhile
				}
				if err != nil {
					errs <- err
					return
				}
				var last uint64
				for n := 0; ; n++ {
					rec, err := r.Next()
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						errs <- err
						break
					}
					if n > 0 && rec.Offset <= last {
						errs <- fmt.Errorf("offset %d after %d", rec.Offset, last)
						break
					}
					last = rec.Offset
					reads.Add(1)
				}
				r.Close()
			}
		}()
	}
	wg.Wait()
	done.Store(true)
	maint.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := l.NextOffset(); got != 2*appends {
		t.Fatalf("NextOffset = %d, want %d", got, 2*appends)
	}
	if err := l.Verify(); err != nil {
		t.Fatal(err)
	}
	if reads.Load() == 0 {
		t.Fatal("the readers read nothing")
	}
}
