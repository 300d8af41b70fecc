package wal

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestRoundTrip(t *testing.T) {
	tests := []struct {
		name    string
		key     []byte
		payload []byte
		count   uint32
	}{
		{"empty key and payload", nil, nil, 1},
		{"small", []byte("t/1"), []byte("hello"), 1},
		{"batch of 7", []byte("t/batch"), bytes.Repeat([]byte{0xAB}, 300), 7},
		{"larger than the scan buffer", []byte("big"), payloadFor(3, 200<<10), 1},
	}
	dir := t.TempDir()
	l := openLog(t, Options{Dir: dir, Fsync: SyncNever})
	var exp []want
	for _, tt := range tests {
		off, err := l.Append(tt.key, tt.payload, tt.count)
		if err != nil {
			t.Fatalf("%s: Append: %v", tt.name, err)
		}
		exp = append(exp, want{off, tt.count, string(tt.key), string(tt.payload)})
	}
	if got := l.NextOffset(); got != 10 {
		t.Fatalf("NextOffset = %d, want 10", got)
	}
	checkRecords(t, l, 0, exp)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	l2 := openLog(t, Options{Dir: dir})
	if got := l2.NextOffset(); got != 10 {
		t.Fatalf("NextOffset after reopen = %d, want 10", got)
	}
	checkRecords(t, l2, 0, exp)
	// Offsets inside a batch record return the whole batch.
	checkRecords(t, l2, 5, exp[2:])
}

func TestAppendBatch(t *testing.T) {
	fsys := newFaultFS()
	l := openLog(t, Options{FS: fsys, Fsync: SyncNever})
	if _, err := l.Append([]byte("first"), []byte("x"), 1); err != nil {
		t.Fatal(err)
	}
	writes := fsys.writes.Load()
	entries := []Entry{
		{Key: []byte("a"), Payload: []byte("1"), Count: 1},
		{Key: []byte("b"), Payload: []byte("22"), Count: 3},
		{Key: nil, Payload: []byte("333"), Count: 1},
	}
	first, err := l.AppendBatch(entries)
	if err != nil {
		t.Fatal(err)
	}
	if first != 1 {
		t.Fatalf("first = %d, want 1", first)
	}
	if got := fsys.writes.Load() - writes; got != 1 {
		t.Fatalf("AppendBatch made %d writes, want 1", got)
	}
	if got := l.NextOffset(); got != 6 {
		t.Fatalf("NextOffset = %d, want 6", got)
	}
	checkRecords(t, l, 1, []want{{1, 1, "a", "1"}, {2, 3, "b", "22"}, {5, 1, "", "333"}})
	if _, err := l.AppendBatch(nil); !errors.Is(err, ErrEmptyBatch) {
		t.Fatalf("AppendBatch(nil) = %v, want ErrEmptyBatch", err)
	}
}

func TestLimits(t *testing.T) {
	l := openLog(t, Options{MaxKeySize: 8, MaxPayloadSize: 16, MaxBatchCount: 4, Fsync: SyncNever})
	tests := []struct {
		name    string
		key     []byte
		payload []byte
		count   uint32
		want    error
	}{
		{"key too large", make([]byte, 9), nil, 1, ErrKeyTooLarge},
		{"payload too large", nil, make([]byte, 17), 1, ErrPayloadTooLarge},
		{"count zero", nil, nil, 0, ErrBadCount},
		{"count above max", nil, nil, 5, ErrBadCount},
		{"at the limits", make([]byte, 8), make([]byte, 16), 4, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := l.NextOffset()
			_, err := l.Append(tt.key, tt.payload, tt.count)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("Append = %v, want %v", err, tt.want)
			}
			_, berr := l.AppendBatch([]Entry{{Key: tt.key, Payload: tt.payload, Count: tt.count}})
			if !errors.Is(berr, tt.want) || (tt.want == nil) != (berr == nil) {
				t.Fatalf("AppendBatch = %v, want %v", berr, tt.want)
			}
			if tt.want != nil && l.NextOffset() != before {
				t.Fatalf("a refused append moved NextOffset %d -> %d", before, l.NextOffset())
			}
		})
	}
	if !strings.HasPrefix(ErrKeyTooLarge.Error(), "wal: ") {
		t.Fatalf("sentinel %q lacks the package prefix", ErrKeyTooLarge)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		o    Options
		bad  bool
	}{
		{"defaults", Options{Dir: "x"}, false},
		{"no dir", Options{}, true},
		{"tiny segments", Options{Dir: "x", SegmentBytes: 10}, true},
		{"unknown policy", Options{Dir: "x", Fsync: Policy(9)}, true},
		{"segments beyond uint32 positions", Options{Dir: "x", SegmentBytes: 4 << 30}, true},
		{"negative retention", Options{Dir: "x", Retention: Retention{Age: -time.Second}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.o.Validate(); (err != nil) != tt.bad {
				t.Fatalf("Validate = %v, want error: %v", err, tt.bad)
			}
		})
	}
	for _, s := range []string{"always", "interval", "never"} {
		p, err := ParsePolicy(s)
		if err != nil || p.String() != s {
			t.Fatalf("ParsePolicy(%q) = %v, %v", s, p, err)
		}
	}
}

// TestAppendAllocs pins the zero-allocation append and read paths.
func TestAppendAllocs(t *testing.T) {
	l := openLog(t, Options{Fsync: SyncNever, SegmentBytes: 1 << 30})
	key, payload := []byte("tenant/topic/1"), make([]byte, 64)
	if _, err := l.Append(key, payload, 1); err != nil { // sizes the encode buffer
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(2000, func() {
		if _, err := l.Append(key, payload, 1); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Append allocates %.1f times per call, want 0", n)
	}
	entries := []Entry{{Key: key, Payload: payload, Count: 1}, {Key: key, Payload: payload, Count: 2}}
	if n := testing.AllocsPerRun(1000, func() {
		if _, err := l.AppendBatch(entries); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("AppendBatch allocates %.1f times per call, want 0", n)
	}
	r, err := l.ReadFrom(0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	loc, err := r.NextLocation()
	if err != nil || loc.Offset != 0 {
		t.Fatalf("NextLocation = %d, %v", loc.Offset, err)
	}
	if n := testing.AllocsPerRun(2000, func() {
		if _, err := r.NextLocation(); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Reader.NextLocation allocates %.1f times per call, want 0", n)
	}
	if n := testing.AllocsPerRun(2000, func() {
		if _, err := r.Next(); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Reader.Next allocates %.1f times per call, want 0", n)
	}
}

// TestAppendSyncAllocs: the group-commit path (append, lead an fsync,
// publish) allocates nothing either.
func TestAppendSyncAllocs(t *testing.T) {
	l := openLog(t, Options{Fsync: SyncAlways})
	key, payload := []byte("tenant/topic/1"), make([]byte, 64)
	if _, err := l.AppendSync(key, payload, 1); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(50, func() {
		if _, err := l.AppendSync(key, payload, 1); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("AppendSync allocates %.1f times per call, want 0", n)
	}
}

func TestRollBySize(t *testing.T) {
	dir := t.TempDir()
	// 100-byte payloads + 6-byte keys + 33 overhead = 139..140 bytes; 3 per segment.
	l := openLog(t, Options{Dir: dir, SegmentBytes: 450, Fsync: SyncNever, IndexInterval: 1})
	exp := appendN(t, l, 10, 100)
	segs := l.Segments()
	if want := []uint64{0, 3, 6, 9}; fmt.Sprint(segs) != fmt.Sprint(want) {
		t.Fatalf("segments = %v, want %v", segs, want)
	}
	for _, base := range segs[:3] {
		if size := fileSize(t, segPath(dir, base)); size > 450 {
			t.Errorf("segment %d is %d bytes, above SegmentBytes", base, size)
		}
		if size := fileSize(t, strings.TrimSuffix(segPath(dir, base), ".wal")+".idx"); size != 3*IndexEntrySize {
			t.Errorf("index of %d is %d bytes, want %d", base, size, 3*IndexEntrySize)
		}
	}
	checkRecords(t, l, 0, exp)
	checkRecords(t, l, 4, exp[4:])
	if got := l.FirstOffset(); got != 0 {
		t.Fatalf("FirstOffset = %d", got)
	}
	// A record larger than a segment gets a segment of its own.
	big, err := l.Append([]byte("big"), make([]byte, 1000), 1)
	if err != nil {
		t.Fatal(err)
	}
	if segs := l.Segments(); segs[len(segs)-1] != big {
		t.Fatalf("big record at %d not at the start of a new segment (%v)", big, segs)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2 := openLog(t, Options{Dir: dir, SegmentBytes: 450, IndexInterval: 1})
	checkRecords(t, l2, 0, append(exp, want{big, 1, "big", string(make([]byte, 1000))}))
}

func TestRoll(t *testing.T) {
	l := openLog(t, Options{Fsync: SyncNever})
	if err := l.Roll(); err != nil || len(l.Segments()) != 1 {
		t.Fatalf("Roll of an empty segment = %v, segments %v", err, l.Segments())
	}
	exp := appendN(t, l, 3, 10)
	if err := l.Roll(); err != nil {
		t.Fatal(err)
	}
	if segs := l.Segments(); fmt.Sprint(segs) != "[0 3]" {
		t.Fatalf("segments = %v", segs)
	}
	if l.Durable() != 3 {
		t.Fatalf("a sealed segment is fsynced: Durable = %d, want 3", l.Durable())
	}
	checkRecords(t, l, 0, exp)
}

func TestRollByAge(t *testing.T) {
	clock := newFakeClock()
	l := openLog(t, Options{SegmentAge: time.Minute, Now: clock.Now, Fsync: SyncNever})
	appendN(t, l, 3, 10)
	clock.Advance(59 * time.Second)
	appendN(t, l, 1, 10)
	if n := len(l.Segments()); n != 1 {
		t.Fatalf("rolled before SegmentAge: %d segments", n)
	}
	clock.Advance(time.Second)
	off, err := l.Append(nil, []byte("late"), 1)
	if err != nil {
		t.Fatal(err)
	}
	if segs := l.Segments(); len(segs) != 2 || segs[1] != off {
		t.Fatalf("segments = %v, want a new one at %d", segs, off)
	}
}

func TestReadFromPositions(t *testing.T) {
	l := openLog(t, Options{SegmentBytes: 2000, IndexInterval: 300, Fsync: SyncNever})
	exp := appendN(t, l, 40, 90)
	for _, from := range []uint64{0, 1, 13, 14, 15, 27, 39} {
		t.Run(fmt.Sprint(from), func(t *testing.T) { checkRecords(t, l, from, exp[from:]) })
	}
	t.Run("end then follow", func(t *testing.T) {
		r, err := l.ReadFrom(40)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if _, err := r.Next(); !errors.Is(err, io.EOF) {
			t.Fatalf("Next at end = %v, want io.EOF", err)
		}
		more := appendN(t, l, 30, 90) // crosses segment boundaries
		for i, w := range more {
			rec, err := r.Next()
			if err != nil {
				t.Fatalf("record %d: %v", i, err)
			}
			if string(rec.Key) != w.key || rec.Offset != 40+uint64(i) {
				t.Fatalf("record %d: offset %d key %q, want %d %q", i, rec.Offset, rec.Key, 40+i, w.key)
			}
		}
	})
	t.Run("out of range", func(t *testing.T) {
		if _, err := l.ReadFrom(l.NextOffset() + 1); !errors.Is(err, ErrOutOfRange) {
			t.Fatalf("ReadFrom past the end = %v", err)
		}
	})
}

func TestLocate(t *testing.T) {
	l := openLog(t, Options{SegmentBytes: 1000, Fsync: SyncNever})
	exp := appendN(t, l, 20, 100)
	for _, w := range exp {
		loc, err := l.Locate(w.off)
		if err != nil {
			t.Fatalf("Locate(%d): %v", w.off, err)
		}
		buf := make([]byte, loc.PayloadSize)
		if _, err := loc.File.ReadAt(buf, loc.PayloadPos()); err != nil {
			t.Fatal(err)
		}
		key := make([]byte, loc.KeySize)
		if _, err := loc.File.ReadAt(key, loc.KeyPos()); err != nil {
			t.Fatal(err)
		}
		loc.Release()
		if loc.Offset != w.off || string(buf) != w.payload || string(key) != w.key {
			t.Fatalf("Locate(%d) found offset %d key %q", w.off, loc.Offset, key)
		}
	}
	if _, err := l.Locate(20); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("Locate(next) = %v, want ErrOutOfRange", err)
	}
}

func TestConcurrentAppendAndRead(t *testing.T) {
	l := openLog(t, Options{SegmentBytes: 4096, Fsync: SyncNever})
	const writers, per = 4, 200
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				if _, err := l.Append([]byte(fmt.Sprintf("w%d", w)), []byte(fmt.Sprintf("%d", i)), 1); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	r, err := l.ReadFrom(0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	last := map[string]int{}
	deadline := time.Now().Add(10 * time.Second)
	for n := 0; n < writers*per; {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			if time.Now().After(deadline) {
				t.Fatalf("read only %d records", n)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if rec.Offset != uint64(n) {
			t.Fatalf("record %d has offset %d", n, rec.Offset)
		}
		var i int
		fmt.Sscan(string(rec.Payload), &i)
		if prev, ok := last[string(rec.Key)]; ok && i != prev+1 {
			t.Fatalf("writer %s: %d after %d", rec.Key, i, prev)
		}
		last[string(rec.Key)] = i
		n++
	}
	wg.Wait()
}

func TestAppendAfterClose(t *testing.T) {
	l := openLog(t, Options{})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(nil, []byte("x"), 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close = %v", err)
	}
	if _, err := l.ReadFrom(0); !errors.Is(err, ErrClosed) {
		t.Fatalf("ReadFrom after Close = %v", err)
	}
}

func TestLeftoverTempFilesRemoved(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, Options{Dir: dir})
	appendN(t, l, 3, 10)
	l.Close()
	tmp := segPath(dir, 0) + ".tmp"
	if err := os.WriteFile(tmp, []byte("half-written compaction"), 0o644); err != nil {
		t.Fatal(err)
	}
	l2 := openLog(t, Options{Dir: dir})
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temp file still there: %v", err)
	}
	if l2.NextOffset() != 3 {
		t.Fatalf("NextOffset = %d", l2.NextOffset())
	}
}

// fakeClock is a settable time source for age-based rolls and retention.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
