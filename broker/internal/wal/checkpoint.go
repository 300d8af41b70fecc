package wal

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Checkpoint writes into dir (created; it must not hold a log) a copy of
// the log as it is now, which Open reads as a log with the same records
// and the same next offset: every sealed segment is hard-linked (sealed
// segments never change; compaction and removal replace or unlink the
// path, never the inode) and the active segment's records so far are
// copied. This is Pebble's checkpoint idea: cheap, consistent, on the same
// filesystem (a link that fails, e.g. across filesystems, is a copy).
// Indexes are not copied: Open rebuilds them. Appends may continue
// meanwhile; what they add is not in the copy. The files are fsynced.
func (l *Log) Checkpoint(dir string) error {
	l.maint.Lock() // no compaction or removal swaps a segment meanwhile
	defer l.maint.Unlock()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	type part struct {
		s    *segment
		size int64
		link bool
	}
	parts := make([]part, 0, len(l.segs))
	for i, s := range l.segs {
		s.acquire()
		parts = append(parts, part{s: s, size: s.size.Load(), link: i < len(l.segs)-1 && s.sealed.Load()})
	}
	l.mu.Unlock()
	defer func() {
		for _, p := range parts {
			p.s.release()
		}
	}()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("wal: checkpoint: %w", err)
	}
	for _, p := range parts {
		dst := filepath.Join(dir, filepath.Base(p.s.path))
		if p.link {
			if err := os.Link(p.s.path, dst); err == nil {
				continue
			}
		}
		if err := copyPrefix(p.s.f, dst, p.size); err != nil {
			return fmt.Errorf("wal: checkpoint %s: %w", p.s.path, err)
		}
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("wal: checkpoint: %w", err)
	}
	err = d.Sync()
	return errors.Join(err, d.Close())
}

// copyPrefix writes the first n bytes of src to a new file dst and fsyncs it.
func copyPrefix(src io.ReaderAt, dst string, n int64) error {
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, io.NewSectionReader(src, 0, n))
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}
