package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"berth.dev/testenv"
)

// SIGUSR1 makes the broker log its memory by class and, with
// -heap-profile-dir, write a heap profile there and log the classes after
// a collection.
func TestMemoryReportOnSIGUSR1(t *testing.T) {
	dir := t.TempDir()
	var out testenv.LogBuffer
	log := slog.New(slog.NewJSONHandler(&out, nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	startMemory(ctx, Config{HeapProfileDir: dir}, log) // the Trimmer off: MemReturnEvery 0
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), `"msg":"memory after a collection"`) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	var reports []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		reports = append(reports, m)
	}
	if len(reports) != 2 || reports[0]["msg"] != "memory" || reports[1]["msg"] != "memory after a collection" {
		t.Fatalf("log: %s", out.String())
	}
	for _, key := range []string{"memory/classes/heap/objects", "memory/classes/heap/free", "memory/classes/heap/released",
		"memory/classes/heap/unused", "memory/classes/heap/stacks", "memory/classes/metadata/other",
		"memory/classes/os-stacks", "memory/classes/other", "gc/heap/live", "vm_rss_bytes"} {
		if _, ok := reports[0][key].(float64); !ok {
			t.Errorf("report has no %s", key)
		}
	}
	for _, key := range []string{"memory/classes/heap/objects", "memory/classes/heap/stacks", "vm_rss_bytes"} {
		if v, _ := reports[0][key].(float64); v <= 0 {
			t.Errorf("report has %s = %v, want more than 0", key, v)
		}
	}
	if v, _ := reports[1]["gc/heap/live"].(float64); v <= 0 {
		t.Errorf("after a collection the live heap is %v, want more than 0", v)
	}
	name, _ := reports[1]["heap_profile"].(string)
	if filepath.Dir(name) != dir {
		t.Fatalf("heap profile %q, want one in %s", name, dir)
	}
	if st, err := os.Stat(name); err != nil || st.Size() == 0 {
		t.Fatalf("heap profile %s: %v", name, err)
	}
}
