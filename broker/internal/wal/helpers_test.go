package wal

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// testLogger writes the log's own messages into the test output.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tbWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tbWriter struct{ t testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

func openLog(t testing.TB, o Options) *Log {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	if o.Logger == nil {
		o.Logger = testLogger(t)
	}
	l, err := Open(o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// want is a record a test expects to read back.
type want struct {
	off     uint64
	count   uint32
	key     string
	payload string
}

func payloadFor(i int, size int) []byte {
	p := make([]byte, size)
	for j := range p {
		p[j] = byte('a' + (i+j)%26)
	}
	return p
}

// appendN appends n records with the given payload size and returns them.
func appendN(t testing.TB, l *Log, n, size int) []want {
	t.Helper()
	out := make([]want, 0, n)
	for i := range n {
		key := fmt.Sprintf("key-%d", i)
		p := payloadFor(i, size)
		off, err := l.Append([]byte(key), p, 1)
		if err != nil {
			t.Fatalf("Append %d: %v", i, err)
		}
		out = append(out, want{off: off, count: 1, key: key, payload: string(p)})
	}
	return out
}

// readAll reads every record from off until io.EOF.
func readAll(t testing.TB, l *Log, off uint64) ([]want, error) {
	t.Helper()
	r, err := l.ReadFrom(off)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var got []want
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return got, nil
		}
		if err != nil {
			return got, err
		}
		got = append(got, want{rec.Offset, rec.Count, string(rec.Key), string(rec.Payload)})
	}
}

func checkRecords(t testing.TB, l *Log, from uint64, exp []want) {
	t.Helper()
	got, err := readAll(t, l, from)
	if err != nil {
		t.Fatalf("read from %d: %v", from, err)
	}
	if len(got) != len(exp) {
		t.Fatalf("read %d records from %d, want %d", len(got), from, len(exp))
	}
	for i := range exp {
		if got[i] != exp[i] {
			t.Fatalf("record %d: got {off %d count %d key %q payload %d bytes}, want {off %d count %d key %q payload %d bytes}",
				i, got[i].off, got[i].count, got[i].key, len(got[i].payload), exp[i].off, exp[i].count, exp[i].key, len(exp[i].payload))
		}
	}
}

func segPath(dir string, base uint64) string { return filepath.Join(dir, segmentName(base)) }

func fileSize(t testing.TB, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// copyDir copies the regular files of src into a new temp dir.
func copyDir(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func flipBit(t testing.TB, path string, pos int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[pos] ^= 0x10
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
