package nodeclient_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"berth.dev/services/internal/nodeclient"
)

// TestErrors: refusals and failures of a node at the HTTP level.
func TestErrors(t *testing.T) {
	cases := []struct {
		name        string
		status      int
		body        string
		unavailable bool
		refusal     int
	}{
		{"ok", 200, `{"sessions":[{"client_id":"c1"}]}`, false, 0},
		{"server error", 500, `{"error":"boom"}`, true, 0},
		{"not json", 200, `<html>`, true, 0},
		{"refused", 403, `{"error":"bad token"}`, false, 403},
		{"refused without body", 404, ``, false, 404},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var auth, path string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				auth, path = r.Header.Get("Authorization"), r.URL.Path
				w.WriteHeader(c.status)
				_, _ = w.Write([]byte(c.body))
			}))
			defer srv.Close()
			ss, err := nodeclient.New(nil, "tok").Sessions(context.Background(), srv.Listener.Addr().String(), "ten_1")
			if auth != "Bearer tok" || path != "/admin/tenants/ten_1/sessions" {
				t.Fatalf("request: auth %q path %q", auth, path)
			}
			var se *nodeclient.StatusError
			switch {
			case c.unavailable:
				if !errors.Is(err, nodeclient.ErrUnavailable) {
					t.Fatalf("err %v, want ErrUnavailable", err)
				}
			case c.refusal != 0:
				if !errors.As(err, &se) || se.Status != c.refusal || se.Message == "" {
					t.Fatalf("err %v, want StatusError %d", err, c.refusal)
				}
			default:
				if err != nil || len(ss) != 1 || ss[0].ClientID != "c1" {
					t.Fatalf("sessions %+v %v", ss, err)
				}
			}
		})
	}
	// Nothing listening.
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.URL
	srv.Close()
	if _, err := nodeclient.New(nil, "tok").Topics(context.Background(), addr, "ten_1"); !errors.Is(err, nodeclient.ErrUnavailable) {
		t.Fatalf("closed node: %v", err)
	}
}
