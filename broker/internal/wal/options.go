package wal

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"
)

// Policy says when appended records are fsynced.
type Policy int

const (
	// SyncAlways: AppendSync returns only after the record is fsynced;
	// concurrent callers share one fsync (group commit). The zero value.
	SyncAlways Policy = iota
	// SyncInterval: a background goroutine fsyncs every FsyncInterval.
	SyncInterval
	// SyncNever: the log never fsyncs on its own (only on seal and Close).
	SyncNever
)

func (p Policy) String() string {
	switch p {
	case SyncAlways:
		return "always"
	case SyncInterval:
		return "interval"
	case SyncNever:
		return "never"
	}
	return fmt.Sprintf("Policy(%d)", int(p))
}

// ParsePolicy parses "always", "interval" or "never".
func ParsePolicy(s string) (Policy, error) {
	for _, p := range []Policy{SyncAlways, SyncInterval, SyncNever} {
		if p.String() == s {
			return p, nil
		}
	}
	return 0, fmt.Errorf("wal: unknown fsync policy %q", s)
}

// Retention bounds how much history is kept. Zero fields mean unbounded.
type Retention struct {
	Bytes int64         // total bytes of all segments
	Age   time.Duration // age of a sealed segment's newest record
}

// Options configure a Log. The zero value of every field except Dir has a
// default, applied by Open.
type Options struct {
	Dir            string        // directory of the log; created if missing
	SegmentBytes   int64         // roll when the active segment would exceed this; default 64 MiB
	SegmentAge     time.Duration // roll when the active segment's first record is this old; 0 = never
	Fsync          Policy        // default SyncAlways
	FsyncInterval  time.Duration // for SyncInterval; default 100ms
	MaxKeySize     int           // default 64 KiB
	MaxPayloadSize int           // default 16 MiB
	MaxBatchCount  uint32        // largest record count; default 65536
	IndexInterval  int64         // bytes between index entries; default 4096
	Retention      Retention
	FS             FS           // default: the operating system's
	Logger         *slog.Logger // default: discard
	Now            func() time.Time
	// OnFsync, when set, is told how long each group-commit fsync of the
	// active segment took (metrics); it must not block.
	OnFsync func(time.Duration)
}

const (
	defaultSegmentBytes  = 64 << 20
	defaultFsyncInterval = 100 * time.Millisecond
	defaultMaxKey        = 64 << 10
	defaultMaxPayload    = 16 << 20
	defaultMaxBatch      = 1 << 16
	defaultIndexInterval = 4096
)

// withDefaults returns o with every zero field set to its default.
func (o Options) withDefaults() Options {
	if o.SegmentBytes == 0 {
		o.SegmentBytes = defaultSegmentBytes
	}
	if o.FsyncInterval == 0 {
		o.FsyncInterval = defaultFsyncInterval
	}
	if o.MaxKeySize == 0 {
		o.MaxKeySize = defaultMaxKey
	}
	if o.MaxPayloadSize == 0 {
		o.MaxPayloadSize = defaultMaxPayload
	}
	if o.MaxBatchCount == 0 {
		o.MaxBatchCount = defaultMaxBatch
	}
	if o.IndexInterval == 0 {
		o.IndexInterval = defaultIndexInterval
	}
	if o.FS == nil {
		o.FS = OSFS{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Validate reports every problem with o (after defaults are applied).
func (o Options) Validate() error {
	o = o.withDefaults()
	var errs []error
	if o.Dir == "" {
		errs = append(errs, errors.New("wal: Dir is required"))
	}
	if o.SegmentBytes < RecordOverhead {
		errs = append(errs, fmt.Errorf("wal: SegmentBytes %d is below one record header", o.SegmentBytes))
	}
	if o.SegmentAge < 0 {
		errs = append(errs, errors.New("wal: SegmentAge must not be negative"))
	}
	if o.Fsync < SyncAlways || o.Fsync > SyncNever {
		errs = append(errs, fmt.Errorf("wal: unknown fsync policy %d", o.Fsync))
	}
	if o.FsyncInterval < 0 {
		errs = append(errs, errors.New("wal: FsyncInterval must not be negative"))
	}
	if o.MaxKeySize < 0 || o.MaxPayloadSize < 0 || o.IndexInterval < 0 {
		errs = append(errs, errors.New("wal: MaxKeySize, MaxPayloadSize and IndexInterval must not be negative"))
	}
	// Byte positions in the index are uint32: the largest segment is one
	// record past SegmentBytes.
	if o.SegmentBytes+int64(o.MaxKeySize)+int64(o.MaxPayloadSize)+RecordOverhead > math.MaxUint32 {
		errs = append(errs, errors.New("wal: SegmentBytes + MaxKeySize + MaxPayloadSize must stay below 4 GiB"))
	}
	if o.Retention.Bytes < 0 || o.Retention.Age < 0 {
		errs = append(errs, errors.New("wal: Retention must not be negative"))
	}
	return errors.Join(errs...)
}

// Policy returns the log's fsync policy.
func (l *Log) Policy() Policy { return l.opts.Fsync }
