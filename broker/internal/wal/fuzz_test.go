package wal

import (
	"errors"
	"os"
	"testing"
)

// FuzzRecoverTail appends arbitrary bytes to a valid tail segment. Open
// must never panic, and must either recover every valid record (truncating
// the garbage) or refuse with a corruption or version error.
func FuzzRecoverTail(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{Magic})
	f.Add(make([]byte, HeaderSize+4))
	rec := make([]byte, RecordOverhead+2)
	encodeRecord(rec, 1, 3, []byte("k"), []byte("v"), 1)
	f.Add(rec)
	f.Add(rec[:len(rec)-1])
	f.Fuzz(func(t *testing.T, tail []byte) {
		dir := t.TempDir()
		l, err := Open(Options{Dir: dir, Fsync: SyncNever})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if _, err := l.Append([]byte("k"), []byte{byte(i)}, 1); err != nil {
				t.Fatal(err)
			}
		}
		l.Close()
		fh, err := os.OpenFile(segPath(dir, 0), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		fh.Write(tail)
		fh.Close()
		l, err = Open(Options{Dir: dir, Fsync: SyncNever})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupportedVersion) {
				t.Fatalf("Open = %v, want recovery or a corruption/version error", err)
			}
			return
		}
		defer l.Close()
		got, err := readAll(t, l, 0)
		if err != nil {
			t.Fatalf("read after recovery: %v", err)
		}
		if len(got) < 3 {
			t.Fatalf("recovery lost valid records: %d left", len(got))
		}
		for i := range 3 {
			if got[i].payload != string([]byte{byte(i)}) {
				t.Fatalf("record %d changed", i)
			}
		}
	})
}
