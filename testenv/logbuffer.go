package testenv

import (
	"bytes"
	"encoding/json"
	"sync"
	"testing"
)

// LogBuffer is a bytes.Buffer that a logger, or a child process's output,
// writes while the test reads it.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Records returns the lines of a JSON slog handler whose message is msg;
// a line that is not JSON fails the test.
func (l *LogBuffer) Records(t testing.TB, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, ln := range bytes.Split([]byte(l.String()), []byte("\n")) {
		if len(ln) == 0 {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal(ln, &r); err != nil {
			t.Fatalf("log line %q: %v", ln, err)
		}
		if r["msg"] == msg {
			out = append(out, r)
		}
	}
	return out
}
