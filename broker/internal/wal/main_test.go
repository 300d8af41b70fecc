package wal

import (
	"os"
	"testing"
)

// TestMain doubles as the entry point of the child processes some tests
// re-execute this binary as: the crash loop's appender and the sendfile
// strace target.
func TestMain(m *testing.M) {
	if dir := os.Getenv(crashDirEnv); dir != "" {
		crashChild(dir)
		os.Exit(0)
	}
	if os.Getenv(sendfileChildEnv) != "" {
		os.Exit(sendfileChild())
	}
	os.Exit(m.Run())
}
