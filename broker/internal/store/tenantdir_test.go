package store

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"berth.dev/broker/internal/wal"
)

// TenantDirNames finds the directories OpenTenant made (and nothing else
// under root); RemoveTenant erases one, logs and all, and is idempotent.
func TestTenantDirNamesAndRemoveTenant(t *testing.T) {
	root := t.TempDir()
	if names, err := TenantDirNames(filepath.Join(root, "missing")); err != nil || names != nil {
		t.Fatalf("missing root: %v %v", names, err)
	}
	for _, id := range []string{"ten_a", "ten_b"} {
		w, err := OpenTenant(root, id, WALOptions{Fsync: wal.SyncNever, SegmentBytes: 4096})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.SetRetained(&Message{Topic: "a/b", Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(root, "lost+found"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "0123456789abcdef0123456789abcdef"), nil, 0o644); err != nil {
		t.Fatal(err) // a file with a directory's name: not a tenant
	}
	want := []string{filepath.Base(TenantDir(root, "ten_a")), filepath.Base(TenantDir(root, "ten_b"))}
	slices.Sort(want)
	names, err := TenantDirNames(root)
	slices.Sort(names)
	if err != nil || !slices.Equal(names, want) {
		t.Fatalf("TenantDirNames = %v, %v; want %v", names, err, want)
	}
	for range 2 {
		if err := RemoveTenant(root, "ten_a"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(TenantDir(root, "ten_a")); !os.IsNotExist(err) {
		t.Fatalf("ten_a's directory after RemoveTenant: %v", err)
	}
	if names, _ := TenantDirNames(root); !slices.Equal(names, []string{filepath.Base(TenantDir(root, "ten_b"))}) {
		t.Fatalf("after removing ten_a: %v, want only ten_b's", names)
	}
}
