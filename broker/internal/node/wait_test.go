package node

import (
	"testing"
	"time"
)

// poll waits until cond holds, failing the test after within. It is the
// package's one way of waiting for a condition.
func poll(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
}
