package node

import (
	"os"
	"path/filepath"
	"testing"
)

// TestIncarnationIsPerRaftDirectory: a raft directory keeps its raft id
// across restarts; a wiped (fresh) one gets a new raft id, never the one
// whose state was lost; a directory written before incarnations keeps
// the id it had (the peer id).
func TestIncarnationIsPerRaftDirectory(t *testing.T) {
	const node = "node_a"
	dir := filepath.Join(t.TempDir(), "raft")
	inc, created, err := loadIncarnation(dir)
	if err != nil || !created {
		t.Fatalf("first start: %q, created %v, %v", inc, created, err)
	}
	first := raftIDOf(node, inc)
	if first == PeerID(node) {
		t.Fatal("a fresh incarnation took the peer id as its raft id")
	}
	again, created, err := loadIncarnation(dir)
	if err != nil || created || raftIDOf(node, again) != first {
		t.Fatalf("restart: %q (created %v, %v): raft id %d, want %d", again, created, err, raftIDOf(node, again), first)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	wiped, created, err := loadIncarnation(dir)
	if err != nil || !created {
		t.Fatalf("after the wipe: %q, created %v, %v", wiped, created, err)
	}
	if raftIDOf(node, wiped) == first {
		t.Fatal("a wiped raft directory came back under its former raft id")
	}
	if raftIDOf("node_b", wiped) == raftIDOf(node, wiped) {
		t.Fatal("two node ids share a raft id")
	}

	legacy := filepath.Join(t.TempDir(), "raft")
	if err := os.MkdirAll(filepath.Join(legacy, "12345", "log"), 0o755); err != nil {
		t.Fatal(err)
	}
	inc, created, err = loadIncarnation(legacy)
	if err != nil || !created || raftIDOf(node, inc) != PeerID(node) {
		t.Fatalf("legacy directory: %q, created %v, %v: raft id %d, want the peer id %d", inc, created, err, raftIDOf(node, inc), PeerID(node))
	}
	if b, _ := os.ReadFile(filepath.Join(legacy, incarnationFile)); string(b) != legacyIncarnation+"\n" {
		t.Fatalf("legacy incarnation file holds %q", b)
	}
}
