package store

import (
	"os"
	"path/filepath"
	"testing"
)

// TestInstallReplacesTheStore: a store's checkpoint installed in place of
// another store holds the first store's messages, retained messages and
// sessions (and nothing of the replaced one), and its log goes on at the
// same offset.
func TestInstallReplacesTheStore(t *testing.T) {
	src := openTestWAL(t, t.TempDir())
	for i := range 30 {
		if _, err := src.Messages().Append([]byte("t"), []byte("payload-payload-payload-payload"), 1); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	if err := src.SetRetained(&Message{Topic: "r/new", Payload: []byte("new")}); err != nil {
		t.Fatal(err)
	}
	if err := src.SaveSession(&Session{ClientID: "leader-client", ExpiryInterval: 60, Cursor: 7}); err != nil {
		t.Fatal(err)
	}
	ckpt := filepath.Join(t.TempDir(), "ckpt")
	if err := src.Checkpoint(ckpt); err != nil {
		t.Fatal(err)
	}

	dir := filepath.Join(t.TempDir(), "tenant")
	dst := openTestWAL(t, dir)
	if err := dst.SetRetained(&Message{Topic: "r/old", Payload: []byte("old")}); err != nil {
		t.Fatal(err)
	}
	got, err := dst.Install(ckpt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = got.Close() })
	if r := allRetained(t, got); len(r) != 1 || string(r["r/new"].Payload) != "new" {
		t.Fatalf("retained after install: %v", r)
	}
	if s := allSessions(t, got); len(s) != 1 || s["leader-client"].Cursor != 7 {
		t.Fatalf("sessions after install: %v", s)
	}
	if got.Messages().NextOffset() != src.Messages().NextOffset() {
		t.Fatalf("message log at %d, want %d", got.Messages().NextOffset(), src.Messages().NextOffset())
	}
	if _, err := os.Stat(dir + oldSuffix); !os.IsNotExist(err) {
		t.Fatalf("the replaced store is left behind: %v", err)
	}
}

// TestOpenRecoversAnInterruptedInstall: a crash between Install's two
// renames leaves only <dir>.old: opening the store moves it back (the old
// state, whole); a crash after both leaves a stale <dir>.old beside the new
// store: opening removes it.
func TestOpenRecoversAnInterruptedInstall(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tenant")
	w := openTestWAL(t, dir)
	if err := w.SetRetained(&Message{Topic: "r/kept", Payload: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dir, dir+oldSuffix); err != nil { // crash after the first rename
		t.Fatal(err)
	}
	w = openTestWAL(t, dir)
	if r := allRetained(t, w); len(r) != 1 {
		t.Fatalf("after recovery: %v", r)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir+oldSuffix, "messages"), 0o755); err != nil { // crash before the removal
		t.Fatal(err)
	}
	w = openTestWAL(t, dir)
	if _, err := os.Stat(dir + oldSuffix); !os.IsNotExist(err) {
		t.Fatalf("stale %s kept: %v", dir+oldSuffix, err)
	}
	if r := allRetained(t, w); len(r) != 1 {
		t.Fatalf("after recovery: %v", r)
	}
}
