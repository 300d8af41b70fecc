package backup

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"berth.dev/broker/internal/store"
	"berth.dev/broker/internal/wal"
)

// writeStore makes a data directory holding one tenant's (empty, closed)
// store.
func writeStore(t *testing.T, root string) {
	t.Helper()
	w, err := store.OpenTenant(root, "ten_1", store.WALOptions{Fsync: wal.SyncAlways})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCopyRefusals: no source, or a destination with files in it.
func TestCopyRefusals(t *testing.T) {
	root := t.TempDir()
	if _, err := Copy(filepath.Join(root, "missing"), filepath.Join(root, "out")); !errors.Is(err, ErrNoSource) {
		t.Fatalf("missing source: %v", err)
	}
	data, out := filepath.Join(root, "data"), filepath.Join(root, "out")
	writeStore(t, data)
	if err := os.MkdirAll(out, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Copy(data, out); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("non-empty destination: %v", err)
	}
}

// TestBackupInsideData: a backup written into a directory under the data
// directory (the node's own volume) does not copy itself, and restores.
func TestBackupInsideData(t *testing.T) {
	data := t.TempDir()
	writeStore(t, data)
	out := filepath.Join(data, "backup-1")
	st, err := Copy(data, out)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(out, "backup-1")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the backup holds a copy of itself: %v", err)
	}
	restored := filepath.Join(t.TempDir(), "restored")
	rs, err := Restore(out, restored)
	if err != nil {
		t.Fatal(err)
	}
	if rs.Tenants != 1 || rs.Files != st.Files {
		t.Fatalf("restored %+v from a backup of %+v; want 1 tenant, the same files", rs, st)
	}
}

// TestRestoreTruncatesTornTail: a backup whose active segment ends in half
// a record (a write the copy caught midway) restores, and the store opens.
func TestRestoreTruncatesTornTail(t *testing.T) {
	data, out := t.TempDir(), filepath.Join(t.TempDir(), "b")
	writeStore(t, data)
	if _, err := Copy(data, out); err != nil {
		t.Fatal(err)
	}
	seg := filepath.Join(store.TenantDir(out, "ten_1"), "messages", "00000000000000000000.wal")
	f, err := os.OpenFile(seg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte{1, 0, 0, 0, 0, 0, 0, 0}); err != nil { // a record header's first bytes
		t.Fatal(err)
	}
	f.Close()
	if st, err := Restore(out, filepath.Join(t.TempDir(), "r")); err != nil || st.Tenants != 1 {
		t.Fatalf("restore of a torn tail: %+v, %v", st, err)
	}
}
