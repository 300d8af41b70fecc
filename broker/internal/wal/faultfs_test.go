package wal

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"sync"
	"sync/atomic"
)

// faultFS wraps the real filesystem and injects faults into .wal files:
// short writes and fsync errors. It also counts writes, fsyncs and reads
// of .wal files.
type faultFS struct {
	OSFS
	writes atomic.Int64
	syncs  atomic.Int64
	reads  atomic.Int64 // ReadAt calls on .wal files
	read   atomic.Int64 // bytes read by them

	mu         sync.Mutex
	shortWrite int   // fail the next n writes after writing half
	syncErr    error // returned by every .wal fsync while set
	truncErr   error // returned by every .wal truncate while set
	onSync     func()
}

func newFaultFS() *faultFS { return &faultFS{} }

var errInjected = errors.New("injected fault")

func (f *faultFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	of, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: of, fs: f, wal: strings.HasSuffix(name, SegmentSuffix)}, nil
}

func (f *faultFS) setShortWrites(n int) {
	f.mu.Lock()
	f.shortWrite = n
	f.mu.Unlock()
}

func (f *faultFS) setSyncErr(err error) {
	f.mu.Lock()
	f.syncErr = err
	f.mu.Unlock()
}

func (f *faultFS) setTruncErr(err error) {
	f.mu.Lock()
	f.truncErr = err
	f.mu.Unlock()
}

func (f *faultFS) setOnSync(fn func()) {
	f.mu.Lock()
	f.onSync = fn
	f.mu.Unlock()
}

type faultFile struct {
	*os.File
	fs  *faultFS
	wal bool
}

// OSFile exposes the real file for mmap and sendfile.
func (f *faultFile) OSFile() *os.File { return f.File }

func (f *faultFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	if f.wal {
		f.fs.reads.Add(1)
		f.fs.read.Add(int64(n))
	}
	return n, err
}

func (f *faultFile) Write(p []byte) (int, error) {
	f.fs.writes.Add(1)
	f.fs.mu.Lock()
	short := f.wal && f.fs.shortWrite > 0
	if short {
		f.fs.shortWrite--
	}
	f.fs.mu.Unlock()
	if short {
		n, _ := f.File.Write(p[:len(p)/2])
		return n, errInjected
	}
	return f.File.Write(p)
}

func (f *faultFile) Truncate(size int64) error {
	f.fs.mu.Lock()
	err := f.fs.truncErr
	f.fs.mu.Unlock()
	if f.wal && err != nil {
		return err
	}
	return f.File.Truncate(size)
}

func (f *faultFile) Sync() error {
	f.fs.mu.Lock()
	err, hook := f.fs.syncErr, f.fs.onSync
	f.fs.mu.Unlock()
	if f.wal {
		f.fs.syncs.Add(1)
		if hook != nil {
			hook()
		}
		if err != nil {
			return err
		}
	}
	return f.File.Sync()
}
