package metering

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"berth.dev/billing/internal/webhook"
	"berth.dev/testenv"
)

// received is one POST the account's endpoint got, its signature checked
// by the endpoint itself.
type received struct {
	body     []byte
	t        int64 // the signature's timestamp
	verified bool
}

// endpoint is an account's webhook receiver: it verifies each request's
// Berth-Signature (HMAC-SHA256 over "<t>.<body>" with the secret, computed
// here) and answers the statuses queued, then 200.
type endpoint struct {
	secret   string
	mu       sync.Mutex
	got      []received
	statuses []int
}

func (e *endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc := received{body: body}
	var sig string
	for _, part := range strings.Split(r.Header.Get("Berth-Signature"), ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "t":
			rc.t, _ = strconv.ParseInt(v, 10, 64)
		case "v1":
			sig = v
		}
	}
	m := hmac.New(sha256.New, []byte(e.secret))
	m.Write([]byte(strconv.FormatInt(rc.t, 10) + "." + string(body)))
	want := hex.EncodeToString(m.Sum(nil))
	rc.verified = r.Method == http.MethodPost && r.Header.Get("Content-Type") == "application/json" &&
		hmac.Equal([]byte(sig), []byte(want))
	e.mu.Lock()
	e.got = append(e.got, rc)
	status := http.StatusOK
	if len(e.statuses) > 0 {
		status, e.statuses = e.statuses[0], e.statuses[1:]
	}
	e.mu.Unlock()
	w.WriteHeader(status)
}

func (e *endpoint) requests() []received {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]received(nil), e.got...)
}

// TestBudgetWebhooksSignedRetriedOncePerThreshold: with a budget webhook,
// each threshold reached in a month is POSTed to the account's endpoint as
// a signed JSON event: failed attempts (500) are retried after 1 and then
// 2 more minutes, not before; the event is the same on every attempt
// (re-signed with the attempt's time); once delivered it is never sent
// again; 100 % is a new event; the next month's 80 % another; an account
// with a budget and no webhook gets no POST.
func TestBudgetWebhooksSignedRetriedOncePerThreshold(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	ep := &endpoint{secret: "whsec_budget_test", statuses: []int{500, 503}}
	srv := httptest.NewServer(ep)
	defer srv.Close()
	var clock atomic.Pointer[time.Time]
	set := func(v time.Time) { clock.Store(&v) }
	w := New(pool, Config{Grace: time.Hour, Now: func() time.Time { return *clock.Load() },
		Webhooks: webhook.New(pool, webhook.Config{AllowPrivate: true}, quietLog())}, quietLog())
	mar := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	seedTenant(t, pool, "acc_w", "ten_w", "pro", mar)
	seedTenant(t, pool, "acc_quiet", "ten_quiet", "pro", mar)
	// $60.00 budgets: a pro tenant's $49.00 fee is 81.6 % of it.
	if _, err := pool.Exec(ctx, `INSERT INTO budgets (account_id, monthly_cents, action) VALUES ('acc_w', 6000, 'notify'), ('acc_quiet', 6000, 'notify')`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO budget_webhooks (account_id, url, secret) VALUES ('acc_w', $1, $2)`, srv.URL+"/hooks/berth", ep.secret); err != nil {
		t.Fatal(err)
	}
	run := func(at time.Time) Report {
		t.Helper()
		set(at)
		r, err := w.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	expectPosts := func(n int, when string) []received {
		t.Helper()
		got := ep.requests()
		if len(got) != n {
			t.Fatalf("%s: %d POSTs, want %d", when, len(got), n)
		}
		for i, rc := range got {
			if !rc.verified {
				t.Fatalf("%s: POST %d's signature does not verify: %s", when, i+1, rc.body)
			}
		}
		return got
	}

	t0 := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	if r := run(t0); r.BudgetNotices != 2 || r.Webhooks.Retried != 1 {
		t.Fatalf("first run: %+v; want two 80 %% notices and one failed attempt", r)
	}
	expectPosts(1, "first attempt")
	run(t0.Add(59 * time.Second))
	expectPosts(1, "before the first backoff (1m)")
	if r := run(t0.Add(time.Minute)); r.Webhooks.Retried != 1 {
		t.Fatalf("second attempt: %+v", r)
	}
	run(t0.Add(2*time.Minute + 59*time.Second))
	expectPosts(2, "before the second backoff (2m)")
	if r := run(t0.Add(3 * time.Minute)); r.Webhooks.Delivered != 1 {
		t.Fatalf("third attempt: %+v; want it delivered", r)
	}
	run(t0.Add(time.Hour))
	got := expectPosts(3, "after delivery")
	for i, at := range []time.Time{t0, t0.Add(time.Minute), t0.Add(3 * time.Minute)} {
		if got[i].t != at.Unix() || string(got[i].body) != string(got[0].body) {
			t.Fatalf("attempt %d: signed at %d (want %d), body %s (want the first's %s)", i+1, got[i].t, at.Unix(), got[i].body, got[0].body)
		}
	}
	var ev BudgetEvent
	if err := json.Unmarshal(got[0].body, &ev); err != nil {
		t.Fatal(err)
	}
	wantData := BudgetEventData{Month: "2026-03", Percent: 80, TotalCents: 4900, BudgetCents: 6000, Currency: "usd", Action: "notify"}
	if ev.Type != "budget.threshold_reached" || ev.AccountID != "acc_w" || !strings.HasPrefix(ev.ID, "evt_") || ev.Data != wantData {
		t.Fatalf("event %+v, want data %+v", ev, wantData)
	}
	t.Logf("80 %% event: %s", got[0].body)

	// Over the budget: 160 M messages put the draft at $61.00.
	if err := flush(ctx, pool, usageRow{"ten_w", "n1", mar.Add(48 * time.Hour), 160_000_000, 0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	if r := run(t0.Add(2 * time.Hour)); r.Webhooks.Delivered != 1 {
		t.Fatalf("100 %% run: %+v; want its event delivered at once", r)
	}
	run(t0.Add(3 * time.Hour))
	got = expectPosts(4, "after 100 %")
	var ev100 BudgetEvent
	if err := json.Unmarshal(got[3].body, &ev100); err != nil {
		t.Fatal(err)
	}
	if ev100.ID == ev.ID || ev100.Data.Percent != 100 || ev100.Data.TotalCents != 6100 || ev100.Data.Month != "2026-03" {
		t.Fatalf("100 %% event %+v (80 %%'s id %s)", ev100, ev.ID)
	}

	// April: its own 80 %.
	run(time.Date(2026, 4, 2, 0, 0, 0, 0, time.UTC))
	got = expectPosts(5, "in April")
	var evApr BudgetEvent
	if err := json.Unmarshal(got[4].body, &evApr); err != nil {
		t.Fatal(err)
	}
	if evApr.Data.Month != "2026-04" || evApr.Data.Percent != 80 {
		t.Fatalf("April's event %+v", evApr)
	}
	var states string
	if err := pool.QueryRow(ctx, `SELECT string_agg(to_char(month, 'YYYY-MM') || ':' || percent || ':' || state || ':' || attempts, ' ' ORDER BY month, percent)
		FROM budget_webhook_deliveries`).Scan(&states); err != nil {
		t.Fatal(err)
	}
	if states != "2026-03:80:delivered:3 2026-03:100:delivered:1 2026-04:80:delivered:1" {
		t.Fatalf("deliveries %s", states)
	}
}
