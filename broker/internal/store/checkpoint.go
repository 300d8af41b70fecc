package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// oldSuffix names a tenant directory being replaced by Install: it exists
// only between Install's two renames (and until it is removed after).
const oldSuffix = ".old"

// Checkpoint writes into dir (created) a copy of the store as it is now
// (wal.Log.Checkpoint of its three logs: sealed segments hard-linked, the
// active ones copied), the same layout as a tenant directory. A replica
// that is far behind installs it (Install) instead of applying what the
// leader no longer has. Writes may continue meanwhile; the caller makes
// sure none is half done (the tenant's replica loop calls it between two
// entries).
func (w *WAL) Checkpoint(dir string) error {
	w.mu.Lock()
	closed := w.closed
	w.mu.Unlock()
	if closed {
		return ErrClosed
	}
	for name, l := range map[string]interface{ Checkpoint(string) error }{
		dirMessages: w.messages, dirRetained: w.retained, dirSessions: w.sessions,
	} {
		if err := l.Checkpoint(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("store: checkpoint: %w", err)
		}
	}
	return syncPath(dir)
}

// Install closes w, replaces its directory by dir (a Checkpoint, complete
// and fsynced; it is moved, not copied) and returns the store reopened on
// it with w's options. The swap is two renames: the directory moves aside
// to <dir>.old, then dir takes its place; OpenWAL completes or undoes a
// swap a crash interrupted (recoverSwap), so a crash leaves either the old
// store or the new one, whole. On error w is closed and the returned store
// is nil; the caller may reopen the directory with OpenWAL.
func (w *WAL) Install(dir string) (*WAL, error) {
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("store: install: closing the old store: %w", err)
	}
	cur := w.opts.Dir
	old := cur + oldSuffix
	if err := os.RemoveAll(old); err != nil {
		return nil, fmt.Errorf("store: install: %w", err)
	}
	if err := os.Rename(cur, old); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("store: install: %w", err)
	}
	if err := os.Rename(dir, cur); err != nil {
		return nil, fmt.Errorf("store: install: %w", err)
	}
	if err := syncPath(filepath.Dir(cur)); err != nil {
		return nil, fmt.Errorf("store: install: %w", err)
	}
	if err := os.RemoveAll(old); err != nil {
		return nil, fmt.Errorf("store: install: %w", err)
	}
	return OpenWAL(w.opts)
}

// recoverSwap finishes what an interrupted Install left in dir's parent:
// with dir present, a leftover dir.old is removed (the swap was done);
// without it, dir.old is moved back (the swap was not: the old store is
// still the state).
func recoverSwap(dir string) error {
	old := dir + oldSuffix
	if _, err := os.Stat(old); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if _, err := os.Stat(dir); err == nil {
		return os.RemoveAll(old)
	}
	if err := os.Rename(old, dir); err != nil {
		return err
	}
	return syncPath(filepath.Dir(dir))
}

func syncPath(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	return errors.Join(err, d.Close())
}
