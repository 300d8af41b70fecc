package wal

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
)

var recoveryBytes = flag.Int64("wal.recovery-bytes", 64<<20, "log size for BenchmarkRecovery")

func reportMsgs(b *testing.B, msgs int) {
	b.ReportMetric(float64(msgs)/b.Elapsed().Seconds(), "msgs/s")
}

var benchSizes = []int{64, 1024}

func BenchmarkAppend(b *testing.B) {
	for _, size := range benchSizes {
		key := []byte("tenant/devices/42/telemetry")
		payload := payloadFor(1, size)
		rec := int64(RecordOverhead + len(key) + size)
		b.Run(fmt.Sprintf("never/%dB", size), func(b *testing.B) {
			l := openLog(b, Options{Fsync: SyncNever, Logger: quietLogger()})
			b.ReportAllocs()
			b.SetBytes(rec)
			for b.Loop() {
				if _, err := l.Append(key, payload, 1); err != nil {
					b.Fatal(err)
				}
			}
			reportMsgs(b, b.N)
		})
		b.Run(fmt.Sprintf("always-one-appender/%dB", size), func(b *testing.B) {
			l := openLog(b, Options{Fsync: SyncAlways, Logger: quietLogger()})
			b.ReportAllocs()
			b.SetBytes(rec)
			for b.Loop() {
				if _, err := l.AppendSync(key, payload, 1); err != nil {
					b.Fatal(err)
				}
			}
			reportMsgs(b, b.N)
		})
		b.Run(fmt.Sprintf("always-group-commit/%dB", size), func(b *testing.B) {
			fsys := newFaultFS() // no faults: counts fsyncs
			l := openLog(b, Options{Fsync: SyncAlways, FS: fsys, Logger: quietLogger()})
			syncs := fsys.syncs.Load()
			b.ReportAllocs()
			b.SetBytes(rec)
			b.SetParallelism(32) // 32 × GOMAXPROCS concurrent publishers waiting for fsync
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := l.AppendSync(key, payload, 1); err != nil {
						b.Error(err)
						return
					}
				}
			})
			reportMsgs(b, b.N)
			b.ReportMetric(float64(b.N)/float64(fsys.syncs.Load()-syncs), "appends/fsync")
		})
	}
	b.Run("batch-of-100/64B", func(b *testing.B) {
		l := openLog(b, Options{Fsync: SyncNever, Logger: quietLogger()})
		entries := make([]Entry, 100)
		for i := range entries {
			entries[i] = Entry{Key: []byte("tenant/devices/42/telemetry"), Payload: payloadFor(i, 64), Count: 1}
		}
		b.ReportAllocs()
		b.SetBytes(100 * (RecordOverhead + 27 + 64))
		for b.Loop() {
			if _, err := l.AppendBatch(entries); err != nil {
				b.Fatal(err)
			}
		}
		reportMsgs(b, 100*b.N)
	})
}

func BenchmarkRead(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			l := openLog(b, Options{Fsync: SyncNever, Logger: quietLogger()})
			n := (16 << 20) / (size + 60)
			for i := range n {
				if _, err := l.Append([]byte("tenant/devices/42/telemetry"), payloadFor(i, size), 1); err != nil {
					b.Fatal(err)
				}
			}
			r, err := l.ReadFrom(0)
			if err != nil {
				b.Fatal(err)
			}
			defer func() { r.Close() }()
			b.ReportAllocs()
			b.SetBytes(int64(RecordOverhead + 27 + size))
			for b.Loop() {
				_, err := r.Next()
				if errors.Is(err, io.EOF) {
					r.Close()
					if r, err = l.ReadFrom(0); err != nil {
						b.Fatal(err)
					}
					_, err = r.Next()
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			reportMsgs(b, b.N)
		})
	}
}

// writerOnly hides the socket type so SendRange takes the pooled-buffer path.
type writerOnly struct{ io.Writer }

// BenchmarkReplay sends a whole log's payloads over loopback TCP:
// sendfile (file → socket in the kernel), pooled pread+write, and the plain
// Reader path (read into memory, then write).
func BenchmarkReplay(b *testing.B) {
	for _, size := range []int{1024, 16 << 10, 256 << 10} {
		l := openLog(b, Options{Fsync: SyncNever, Logger: quietLogger()})
		total := 32 << 20
		for i := range total / size {
			if _, err := l.Append(nil, payloadFor(i, size), 1); err != nil {
				b.Fatal(err)
			}
		}
		variants := []struct {
			name string
			run  func(c *net.TCPConn) (int, error)
		}{
			{"sendfile", func(c *net.TCPConn) (int, error) { return replay(l, 0, c) }},
			{"pooled-copy", func(c *net.TCPConn) (int, error) { return replay(l, 0, writerOnly{c}) }},
			{"reader-write", func(c *net.TCPConn) (int, error) { return readerReplay(l, c) }},
		}
		for _, v := range variants {
			b.Run(fmt.Sprintf("%s/%dB", v.name, size), func(b *testing.B) {
				client, server := tcpPair(b)
				go io.Copy(io.Discard, server)
				b.ReportAllocs()
				b.SetBytes(int64(total))
				msgs := 0
				for b.Loop() {
					n, err := v.run(client)
					if err != nil {
						b.Fatal(err)
					}
					msgs += n
				}
				reportMsgs(b, msgs)
			})
		}
	}
}

func readerReplay(l *Log, w io.Writer) (int, error) {
	r, err := l.ReadFrom(0)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	n := 0
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		if _, err := w.Write(rec.Payload); err != nil {
			return n, err
		}
		n++
	}
}

// BenchmarkRecovery measures Open on a log of -wal.recovery-bytes:
// "indexed" has 8 MiB sealed segments with indexes (only the tail is
// scanned), "full-scan" is one segment that Open must scan and verify whole.
func BenchmarkRecovery(b *testing.B) {
	size := *recoveryBytes
	for _, v := range []struct {
		name     string
		segBytes int64
	}{{"indexed", 8 << 20}, {"full-scan", size + (1 << 20)}} {
		b.Run(fmt.Sprintf("%s/%dMiB", v.name, size>>20), func(b *testing.B) {
			dir := b.TempDir()
			o := Options{Dir: dir, SegmentBytes: v.segBytes, Fsync: SyncNever, Logger: quietLogger()}
			l, err := Open(o)
			if err != nil {
				b.Fatal(err)
			}
			payload := payloadFor(0, 1024)
			for l.Size() < size {
				if _, err := l.Append([]byte("tenant/devices/42/telemetry"), payload, 1); err != nil {
					b.Fatal(err)
				}
			}
			next := l.NextOffset()
			if err := l.Close(); err != nil {
				b.Fatal(err)
			}
			segs, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
			b.ReportAllocs()
			b.SetBytes(size)
			for b.Loop() {
				l, err := Open(o)
				if err != nil {
					b.Fatal(err)
				}
				if l.NextOffset() != next {
					b.Fatalf("recovered NextOffset %d, want %d", l.NextOffset(), next)
				}
				l.Close()
			}
			b.ReportMetric(float64(len(segs)), "segments")
		})
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
