package e2e

import (
	"fmt"
	"os"
	"testing"

	"berth.dev/e2e/internal/stack"
)

// bins are built once for every test in the package.
var bins stack.Binaries

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "berth-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bins, err = stack.Build(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
