package payment

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"berth.dev/testenv"
)

// formRecorder passes requests on to stripe-mock and records each POST's
// path, Idempotency-Key and form.
type formRecorder struct {
	mu   sync.Mutex
	seen []stripeRequest
}

type stripeRequest struct {
	line string // "POST /v1/… key"
	form url.Values
}

func (f *formRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		body = b
		r.Body = io.NopCloser(bytes.NewReader(b))
	}
	form, _ := url.ParseQuery(string(body))
	f.mu.Lock()
	f.seen = append(f.seen, stripeRequest{r.Method + " " + r.URL.Path + " " + r.Header.Get("Idempotency-Key"), form})
	f.mu.Unlock()
	return http.DefaultTransport.RoundTrip(r)
}

// TestPushCorrectionsAndCreditsOnce: a correction is pushed as a Stripe
// invoice of its own naming the invoice it amends, and a credit as a
// Stripe credit note on the Stripe invoice of the document it amends (an
// invoice or a correction), each request with an idempotency key per
// document; a second push sends nothing.
func TestPushCorrectionsAndCreditsOnce(t *testing.T) {
	pool := testenv.Postgres(t)
	rec := &formRecorder{}
	p, err := New(pool, Config{Key: "sk_test_berth", WebhookSecret: testSecret, URL: testenv.StripeURL(t),
		HTTPClient: &http.Client{Transport: rec, Timeout: 30 * time.Second}}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	seedAccount(t, pool, "acc_a")
	month := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	now := time.Date(2026, 11, 1, 2, 0, 0, 0, time.UTC)
	doc := func(id, kind, amends string, number int64, lines ...int64) {
		t.Helper()
		var total int64
		for _, l := range lines {
			total += l
		}
		var am *string
		if amends != "" {
			am = &amends
		}
		if _, err := pool.Exec(ctx, `INSERT INTO invoices (id, account_id, month, kind, amends, status, currency, total_cents, created_at, updated_at)
			VALUES ($1, 'acc_a', $2, $3, $4, 'draft', 'usd', $5, $6, $6)`, id, month, kind, am, total, now); err != nil {
			t.Fatal(err)
		}
		for i, amt := range lines {
			meter, desc := "messages", "Messages published"
			if kind == "credit" {
				meter, desc = "credit", "outage on 3 October"
			}
			if _, err := pool.Exec(ctx, `INSERT INTO invoice_lines (invoice_id, line, tenant_id, tenant_slug, plan, meter, description, unit, quantity, included, billable, amount_cents)
				VALUES ($1, $2, 'ten_1', 'one', 'pro', $3, $4, 'u', 1, 0, 1, $5)`, id, i+1, meter, desc, amt); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := pool.Exec(ctx, `UPDATE invoices SET status = 'final', number = $2, finalized_at = $3 WHERE id = $1`, id, number, now); err != nil {
			t.Fatal(err)
		}
	}
	doc("inv_1", "invoice", "", 7, 4900, 200)
	doc("inv_corr", "correction", "inv_1", 8, 300)
	doc("inv_cred1", "credit", "inv_1", 9, -500)
	doc("inv_cred2", "credit", "inv_corr", 10, -100)

	if n, err := p.PushFinal(ctx); err != nil || n != 4 {
		t.Fatalf("PushFinal: %d, %v; want the invoice, the correction and two credits", n, err)
	}
	stripeID := func(table, col, id string) (s string) {
		if err := pool.QueryRow(ctx, `SELECT `+col+` FROM `+table+` WHERE invoice_id = $1`, id).Scan(&s); err != nil {
			t.Fatalf("%s of %s: %v", table, id, err)
		}
		return s
	}
	sInv, sCorr := stripeID("invoice_payments", "stripe_invoice_id", "inv_1"), stripeID("invoice_payments", "stripe_invoice_id", "inv_corr")
	cn1, cn2 := stripeID("credit_note_payments", "stripe_credit_note_id", "inv_cred1"), stripeID("credit_note_payments", "stripe_credit_note_id", "inv_cred2")
	if !strings.HasPrefix(cn1, "cn_") || !strings.HasPrefix(cn2, "cn_") {
		t.Fatalf("credit notes %q %q", cn1, cn2)
	}
	var lines []string
	for _, r := range rec.seen {
		lines = append(lines, r.line)
	}
	want := []string{
		"POST /v1/customers berth-customer-acc_a",
		"POST /v1/invoices berth-invoice-inv_1",
		"POST /v1/invoiceitems berth-invoice-inv_1-line-1",
		"POST /v1/invoiceitems berth-invoice-inv_1-line-2",
		"POST /v1/invoices/" + sInv + "/finalize berth-invoice-inv_1-finalize",
		"POST /v1/invoices berth-invoice-inv_corr",
		"POST /v1/invoiceitems berth-invoice-inv_corr-line-1",
		"POST /v1/invoices/" + sCorr + "/finalize berth-invoice-inv_corr-finalize",
		"POST /v1/credit_notes berth-credit-inv_cred1",
		"POST /v1/credit_notes berth-credit-inv_cred2",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("requests:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	form := func(i int, key string) string { return rec.seen[i].form.Get(key) }
	if form(5, "description") != "Berth correction 8 (amends invoice 7)" || form(5, "metadata[berth_amends]") != "inv_1" ||
		form(5, "metadata[berth_invoice_id]") != "inv_corr" || form(6, "amount") != "300" {
		t.Fatalf("correction's Stripe invoice: %v, item %v", rec.seen[5].form, rec.seen[6].form)
	}
	for i, c := range []struct{ invoice, amount, memo, amends string }{
		{sInv, "500", "Berth credit note 9 (amends invoice 7): outage on 3 October", "inv_1"},
		{sCorr, "100", "Berth credit note 10 (amends correction 8): outage on 3 October", "inv_corr"},
	} {
		f := rec.seen[8+i].form
		if f.Get("invoice") != c.invoice || f.Get("lines[0][type]") != "custom_line_item" || f.Get("lines[0][unit_amount]") != c.amount ||
			f.Get("lines[0][quantity]") != "1" || f.Get("lines[0][description]") != "outage on 3 October" ||
			f.Get("memo") != c.memo || f.Get("metadata[berth_amends]") != c.amends {
			t.Errorf("credit note %d: %v", i+1, f)
		}
	}

	rec.seen = nil
	if n, err := p.PushFinal(ctx); err != nil || n != 0 || len(rec.seen) != 0 {
		t.Fatalf("second PushFinal: %d, %v, %d requests; want nothing pushed twice", n, err, len(rec.seen))
	}
}
