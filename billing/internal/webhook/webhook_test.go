package webhook

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"berth.dev/testenv"
)

// TestSign: the signature is HMAC-SHA256 over "<t>.<body>" keyed with the
// secret, as Stripe signs (the vector computed apart, with Python's hmac).
func TestSign(t *testing.T) {
	got := Sign("whsec_test", time.Unix(1767225600, 0), []byte(`{"id":"evt_1"}`))
	want := "t=1767225600,v1=45b40331de0325606dc5400202ade162460fbe48daf9401adfdcd0d7b4f35470"
	if got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
}

// TestPrivateAddressesRefused: by default an endpoint on a loopback
// address is never called (the dial is refused, the attempt recorded as
// failed with the reason and retried later); with AllowPrivate it is.
func TestPrivateAddressesRefused(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	month := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	for _, q := range []string{
		`INSERT INTO accounts (id, email, password_hash) VALUES ('acc_w', 'w@example.com', 'x')`,
		`INSERT INTO budget_notifications (account_id, month, percent, total_cents, budget_cents, capped, created_at)
			VALUES ('acc_w', '2026-03-01T00:00:00Z', 80, 80, 100, false, now())`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `INSERT INTO budget_webhooks (account_id, url, secret) VALUES ('acc_w', $1, 'whsec_x')`, srv.URL); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO budget_webhook_deliveries (event_id, account_id, month, percent, body, next_attempt_at, created_at)
		VALUES ('evt_1', 'acc_w', $1, 80, '{}', $2, $2)`, month, now); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	r, err := New(pool, Config{}, log).DeliverDue(ctx, now)
	if err != nil || r.Retried != 1 || hits.Load() != 0 {
		t.Fatalf("guarded: %+v, %v, %d requests; want one refused attempt and no request", r, err, hits.Load())
	}
	var lastErr string
	if err := pool.QueryRow(ctx, `SELECT last_error FROM budget_webhook_deliveries WHERE event_id = 'evt_1'`).Scan(&lastErr); err != nil ||
		!strings.Contains(lastErr, "private or loopback") {
		t.Fatalf("last_error %q, %v", lastErr, err)
	}
	r, err = New(pool, Config{AllowPrivate: true}, log).DeliverDue(ctx, now.Add(time.Minute))
	if err != nil || r.Delivered != 1 || hits.Load() != 1 {
		t.Fatalf("allowed: %+v, %v, %d requests; want it delivered", r, err, hits.Load())
	}
}
