package httpapi

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"testing"
)

// A request whose client left is not a server error: 499, logged at debug.
func TestClientGoneIsNotAnError(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), keyLogger, log))
	cancel()
	r := httptest.NewRequest("GET", "/v1/tenants", nil).WithContext(ctx)
	w := httptest.NewRecorder()
	writeProblem(w, r, fmt.Errorf("store: list tenants: %w", context.Canceled))
	if w.Code != statusClientClosedRequest || logs.Len() != 0 {
		t.Fatalf("status %d, logs %q", w.Code, logs.String())
	}
	// The same error while the client still waits is a 500, logged.
	r = httptest.NewRequest("GET", "/v1/tenants", nil).WithContext(context.WithValue(context.Background(), keyLogger, log))
	w = httptest.NewRecorder()
	writeProblem(w, r, fmt.Errorf("store: list tenants: %w", context.Canceled))
	if w.Code != 500 || logs.Len() == 0 {
		t.Fatalf("status %d, logs %q", w.Code, logs.String())
	}
}
