package httpapi_test

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

type budgetWebhookOut struct {
	URL         string  `json:"url"`
	Secret      *string `json:"secret"` // only in the PUT that made it
	SecretSet   bool    `json:"secret_set"`
	SecretLast4 string  `json:"secret_last4"`
	Deliveries  []struct {
		EventID  string `json:"event_id"`
		Percent  int    `json:"percent"`
		State    string `json:"state"`
		Attempts int    `json:"attempts"`
	} `json:"deliveries"`
}

// A budget webhook is per account: 404 until set; PUT refuses a URL that
// is not an absolute http(s) URL with a host (422 naming url); the first
// PUT makes a signing secret, later ones keep it unless rotate_secret;
// the secret is in the answer of the PUT that made it (first or rotation)
// and nowhere else: later PUTs and GET show only that one is set and its
// last 4 characters; GET shows the latest deliveries; DELETE removes it
// and its pending deliveries; another account sees none of it.
func TestBudgetWebhook(t *testing.T) {
	e := newEnv(t)
	u := e.signup("hook@example.com")
	other := e.signup("other@example.com")
	const path = "/v1/billing/budget/webhook"
	want(t, e.do(t, "GET", path, u.key, nil), http.StatusNotFound)
	for _, bad := range []string{"", "ftp://example.com/x", "/relative", "https://user:pw@example.com/", "https://example.com/#frag", "https://"} {
		r := e.do(t, "PUT", path, u.key, map[string]any{"url": bad})
		want(t, r, http.StatusUnprocessableEntity)
		if p := r.problem(t); len(p.Errors) != 1 || p.Errors[0].Field != "url" {
			t.Fatalf("url %q: problem %+v, want url named", bad, p)
		}
	}
	put := func(body map[string]any) budgetWebhookOut {
		t.Helper()
		r := e.do(t, "PUT", path, u.key, body)
		want(t, r, http.StatusOK)
		var h budgetWebhookOut
		r.json(t, &h)
		return h
	}
	first := put(map[string]any{"url": "https://hooks.example.com/berth"})
	if first.Secret == nil || !regexp.MustCompile(`^whsec_[0-9a-f]{64}$`).MatchString(*first.Secret) ||
		first.URL != "https://hooks.example.com/berth" || first.Deliveries == nil ||
		!first.SecretSet || first.SecretLast4 != (*first.Secret)[len(*first.Secret)-4:] {
		t.Fatalf("first PUT: %+v", first)
	}
	moved := put(map[string]any{"url": "https://hooks.example.com/v2"})
	if moved.Secret != nil || !moved.SecretSet || moved.SecretLast4 != first.SecretLast4 || moved.URL != "https://hooks.example.com/v2" {
		t.Fatalf("URL change: %+v, want the secret kept and not shown", moved)
	}
	rotated := put(map[string]any{"url": "https://hooks.example.com/v2", "rotate_secret": true})
	if rotated.Secret == nil || *rotated.Secret == *first.Secret || len(*rotated.Secret) != len(*first.Secret) ||
		rotated.SecretLast4 != (*rotated.Secret)[len(*rotated.Secret)-4:] {
		t.Fatalf("rotation: %+v, want a new secret shown", rotated)
	}
	var stored string
	if err := e.pool.QueryRow(context.Background(), `SELECT secret FROM budget_webhooks WHERE url = 'https://hooks.example.com/v2'`).
		Scan(&stored); err != nil || stored != *rotated.Secret {
		t.Fatalf("stored secret %q, %v; want the rotated one", stored, err)
	}

	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO budget_notifications (account_id, month, percent, total_cents, budget_cents, capped, created_at)
			VALUES ($1, date_trunc('month', now(), 'UTC'), 80, 4900, 6000, false, now())`,
		`INSERT INTO budget_webhook_deliveries (event_id, account_id, month, percent, body, state, attempts, next_attempt_at, created_at)
			VALUES ('evt_1', $1, date_trunc('month', now(), 'UTC'), 80, '{}', 'pending', 2, now(), now())`,
	} {
		if _, err := e.pool.Exec(ctx, q, u.accountID); err != nil {
			t.Fatal(err)
		}
	}
	r := e.do(t, "GET", path, u.key, nil)
	want(t, r, http.StatusOK)
	if body := string(r.body); strings.Contains(body, *rotated.Secret) || strings.Contains(body, `"secret":`) {
		t.Fatalf("GET shows the secret: %s", body)
	}
	var got budgetWebhookOut
	r.json(t, &got)
	if !got.SecretSet || got.SecretLast4 != rotated.SecretLast4 || len(got.Deliveries) != 1 || got.Deliveries[0].EventID != "evt_1" ||
		got.Deliveries[0].Attempts != 2 {
		t.Fatalf("GET: %+v", got)
	}
	want(t, e.do(t, "GET", path, other.key, nil), http.StatusNotFound)
	want(t, e.do(t, "DELETE", path, other.key, nil), http.StatusNotFound)
	want(t, e.do(t, "DELETE", path, u.key, nil), http.StatusNoContent)
	want(t, e.do(t, "GET", path, u.key, nil), http.StatusNotFound)
	var pending int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM budget_webhook_deliveries WHERE account_id = $1`, u.accountID).Scan(&pending); err != nil || pending != 0 {
		t.Fatalf("pending deliveries after DELETE: %d, %v", pending, err)
	}
}
