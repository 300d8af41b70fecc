// Package backup copies a node's data directory (-data: one write-ahead
// log store per tenant, docs/operations.md) while the node runs, and
// restores such a copy into an empty directory for a node to start on.
//
// A copy is crash-consistent: every log is append-only, so reading its
// files from another process (the kernel's page cache makes every write the
// node made visible at once) yields what a crash at that moment would have
// left on disk, at most with a torn last record, which the store's recovery
// truncates when it opens the copy. Every record the node had written
// before the copy started is in it, whatever the -fsync policy: the files
// are listed after the start. Within a tenant the message log is copied
// last, so the session and retained logs never point past it. Files being
// replaced while they are copied (a compaction's rename, a seal's index)
// are read whole, old or new; a log whose files vanish meanwhile (retention
// deleted a segment) is copied again.
package backup

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"berth.dev/broker/internal/store"
	"berth.dev/broker/internal/wal"
)

// Errors.
var (
	ErrNotEmpty = errors.New("backup: the destination exists and is not empty")
	ErrNoSource = errors.New("backup: the source is not a directory")
)

// Stats counts what Copy wrote.
type Stats struct {
	Files   int
	Bytes   int64
	Tenants int // Restore: tenant stores opened
}

// retries bounds how often one log directory is copied again when its
// files change under the copy.
const retries = 5

// Copy copies the data directory src into dst (created; it must not exist
// or be empty) while a node may be writing to src. The copy is fsynced.
func Copy(src, dst string) (Stats, error) {
	var st Stats
	if fi, err := os.Stat(src); err != nil || !fi.IsDir() {
		return st, fmt.Errorf("%w: %s", ErrNoSource, src)
	}
	if err := emptyDir(dst); err != nil {
		return st, err
	}
	skip, err := filepath.Abs(dst) // a destination inside src is not copied into itself
	if err != nil {
		return st, fmt.Errorf("backup: %w", err)
	}
	err = copyTree(src, dst, skip, &st)
	return st, err
}

// Restore copies the backup src into the data directory dst (created; it
// must not exist or be empty) for a node to start on, then opens and
// closes every tenant's store there once: its recovery truncates a torn
// last record and refuses a damaged log, so a backup that restores is one
// a node can open. Stats.Tenants counts the stores.
func Restore(src, dst string) (Stats, error) {
	st, err := Copy(src, dst)
	if err != nil {
		return st, err
	}
	names, err := store.TenantDirNames(dst)
	if err != nil {
		return st, fmt.Errorf("backup: %w", err)
	}
	for _, name := range names {
		w, err := store.OpenWAL(store.WALOptions{Dir: filepath.Join(dst, name), Fsync: wal.SyncAlways})
		if err != nil {
			return st, fmt.Errorf("backup: restored tenant directory %s: %w", name, err)
		}
		if err := w.Close(); err != nil {
			return st, fmt.Errorf("backup: restored tenant directory %s: %w", name, err)
		}
		st.Tenants++
	}
	return st, nil
}

func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("backup: %w", err)
	case len(entries) > 0:
		return fmt.Errorf("%w: %s", ErrNotEmpty, dir)
	}
	return os.MkdirAll(dir, 0o700)
}

// copyTree copies directory src into the existing directory dst. A
// directory holding log segments is copied by copyLog; subdirectories
// come in name order except that "messages" comes last.
func copyTree(src, dst, skip string, st *Stats) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	slices.SortStableFunc(entries, func(a, b fs.DirEntry) int {
		return boolInt(a.Name() == "messages") - boolInt(b.Name() == "messages")
	})
	if isLog(entries) {
		return copyLog(src, dst, st)
	}
	for _, e := range entries {
		s, d := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
		if abs, err := filepath.Abs(s); err == nil && abs == skip {
			continue
		}
		switch {
		case e.IsDir():
			if err := os.Mkdir(d, 0o700); err != nil {
				return fmt.Errorf("backup: %w", err)
			}
			if err := copyTree(s, d, skip, st); err != nil {
				return err
			}
		case e.Type().IsRegular():
			n, err := copyFile(s, d)
			if errors.Is(err, fs.ErrNotExist) {
				continue // removed since the listing: not part of the state
			}
			if err != nil {
				return err
			}
			st.Files++
			st.Bytes += n
		}
	}
	return syncDir(dst)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// isLog reports whether a directory's entries are a write-ahead log's
// (wal doc.go: segments named <20 digits>.wal).
func isLog(entries []fs.DirEntry) bool {
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".wal") && len(e.Name()) == 24 {
			return true
		}
	}
	return false
}

// copyLog copies one log directory: segments in offset order (their names
// sort by offset), indexes beside them, leftovers of an interrupted seal
// (*.tmp) skipped. When a listed file has vanished by the time it is read
// (retention removed the segment), the log is copied again from a fresh
// listing, at most retries times.
func copyLog(src, dst string, st *Stats) error {
	for attempt := 0; ; attempt++ {
		var n Stats
		err := copyLogOnce(src, dst, &n)
		if err == nil {
			st.Files += n.Files
			st.Bytes += n.Bytes
			return syncDir(dst)
		}
		if !errors.Is(err, fs.ErrNotExist) || attempt == retries {
			return fmt.Errorf("backup: copying the log %s: %w", src, err)
		}
		if err := os.RemoveAll(dst); err != nil {
			return err
		}
		if err := os.Mkdir(dst, 0o700); err != nil {
			return err
		}
	}
}

func copyLogOnce(src, dst string, st *Stats) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries { // os.ReadDir sorts by name: by base offset
		if !e.Type().IsRegular() || strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		n, err := copyFile(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name()))
		if err != nil {
			return err
		}
		st.Files++
		st.Bytes += n
	}
	return nil
}

// copyFile copies src as it is now to the new file dst and fsyncs it.
func copyFile(src, dst string) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(out, in)
	if err == nil {
		err = out.Sync()
	}
	return n, errors.Join(err, out.Close())
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	return errors.Join(err, d.Close())
}
