package webhook

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
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
// failed and retried later; the account is told "address not allowed",
// not the address its host resolved to); with AllowPrivate it is.
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
		lastErr != "address not allowed" {
		t.Fatalf("last_error %q, %v; want \"address not allowed\", no address", lastErr, err)
	}
	r, err = New(pool, Config{AllowPrivate: true}, log).DeliverDue(ctx, now.Add(time.Minute))
	if err != nil || r.Delivered != 1 || hits.Load() != 1 {
		t.Fatalf("allowed: %+v, %v, %d requests; want it delivered", r, err, hits.Load())
	}
}

// TestPublic: every special-purpose range is refused, IPv4-mapped IPv6
// addresses as their IPv4 address; public addresses pass.
func TestPublic(t *testing.T) {
	for _, c := range []struct {
		addr string
		want bool
	}{
		{"8.8.8.8", true}, {"1.1.1.1", true}, {"2606:4700:4700::1111", true}, {"100.63.255.255", true}, {"100.128.0.0", true},
		{"198.17.255.255", true}, {"198.20.0.0", true}, {"192.0.1.1", true}, {"::ffff:8.8.8.8", true},
		{"127.0.0.1", false}, {"10.1.2.3", false}, {"172.16.0.1", false}, {"192.168.1.1", false}, {"169.254.169.254", false},
		{"0.0.0.0", false}, {"0.1.2.3", false}, {"100.64.0.1", false}, {"100.127.255.255", false}, {"192.0.0.8", false},
		{"198.18.0.1", false}, {"198.19.255.255", false}, {"224.0.0.1", false}, {"255.255.255.255", false},
		{"::", false}, {"::1", false}, {"fe80::1", false}, {"fe80::1%eth0", false}, {"fc00::1", false}, {"fd12::1", false},
		{"fec0::1", false}, {"ff02::1", false}, {"64:ff9b::a00:1", false}, {"64:ff9b::808:808", false}, {"2002:a00:1::", false},
		{"::ffff:127.0.0.1", false}, {"::ffff:10.0.0.1", false}, {"::ffff:100.64.0.1", false}, {"::ffff:169.254.169.254", false},
		{"::ffff:198.18.0.1", false}, {"::a00:1", false},
	} {
		if got := Public(netip.MustParseAddr(c.addr)); got != c.want {
			t.Errorf("Public(%s) = %v, want %v", c.addr, got, c.want)
		}
	}
}

// TestAccountErrorHidesAddresses: what the account is shown of a refused
// or failed attempt names no address.
func TestAccountErrorHidesAddresses(t *testing.T) {
	d := New(nil, Config{Timeout: 5 * time.Second}, slog.New(slog.DiscardHandler))
	for _, c := range []struct{ url, want string }{
		{"http://100.64.0.1:9/hook", "address not allowed"},
		{"http://[::ffff:10.0.0.1]:9/hook", "address not allowed"},
		{"http://[fec0::1]:9/hook", "address not allowed"},
		{"http://198.18.0.1:9/hook", "address not allowed"},
		{"://nope", "invalid URL"},
	} {
		_, err := d.post(context.Background(), c.url, "whsec_x", time.Now(), []byte("{}"))
		if got := accountError(err); got != c.want {
			t.Errorf("%s: %q (from %v), want %q", c.url, got, err, c.want)
		}
	}
}
