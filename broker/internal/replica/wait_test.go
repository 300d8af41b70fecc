package replica

import (
	"testing"
	"time"
)

// waitFor polls cond until it holds or timeout passes; the test fails then.
// It is the package's one way of waiting for a condition.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond) // polling with a deadline
	}
}
