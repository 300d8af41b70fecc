package payment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"

	"berth.dev/billing/plan"
	"berth.dev/quotas"
	"berth.dev/testenv"
)

const testSecret = "whsec_berth_test"

// keyRecorder passes requests on to stripe-mock and records each one's
// method, path and Idempotency-Key.
type keyRecorder struct {
	mu   sync.Mutex
	seen []string
}

func (k *keyRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	k.mu.Lock()
	k.seen = append(k.seen, r.Method+" "+r.URL.Path+" "+r.Header.Get("Idempotency-Key"))
	k.mu.Unlock()
	return http.DefaultTransport.RoundTrip(r)
}

func newProvider(t *testing.T) (*Provider, *pgxpool.Pool, *keyRecorder) {
	t.Helper()
	pool := testenv.Postgres(t)
	rec := &keyRecorder{}
	p, err := New(pool, Config{Key: "sk_test_berth", WebhookSecret: testSecret, URL: testenv.StripeURL(t),
		Grace: time.Hour, HTTPClient: &http.Client{Transport: rec, Timeout: 30 * time.Second}},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return p, pool, rec
}

func seedAccount(t *testing.T, pool *pgxpool.Pool, id string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `INSERT INTO accounts (id, email, password_hash) VALUES ($1, $1 || '@example.com', 'x')`, id); err != nil {
		t.Fatal(err)
	}
}

// seedTenant adds a tenant of account on planName with the plan's default quotas.
func seedTenant(t *testing.T, pool *pgxpool.Pool, account, id, planName string) {
	t.Helper()
	p, err := plan.Lookup(planName)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO tenants (id, account_id, slug, plan) VALUES ($1, $2, replace($1, '_', '-'), $3)`, id, account, planName); err != nil {
		t.Fatal(err)
	}
	cols, ph, args := []string{"tenant_id"}, []string{"$1"}, []any{id}
	for _, f := range quotas.Fields {
		cols = append(cols, f.Name)
		args = append(args, *f.Get(&p.Defaults))
		ph = append(ph, fmt.Sprintf("$%d", len(args)))
	}
	if _, err := pool.Exec(ctx, `INSERT INTO quotas (`+strings.Join(cols, ", ")+`) VALUES (`+strings.Join(ph, ", ")+`)`, args...); err != nil {
		t.Fatal(err)
	}
}

// signed returns a Stripe event of typ about customer, signed with secret
// the way Stripe signs webhooks, and its Stripe-Signature header.
func signed(t *testing.T, secret, id, typ, customer string) ([]byte, string) {
	t.Helper()
	ev := map[string]any{"id": id, "object": "event", "api_version": stripe.APIVersion, "type": typ, "created": time.Now().Unix(),
		"data": map[string]any{"object": map[string]any{"id": "obj_" + id, "customer": customer}}}
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	sp := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: b, Secret: secret, Timestamp: time.Now()})
	return sp.Payload, sp.Header
}

func TestCustomerIsCreatedOnceAndStored(t *testing.T) {
	p, pool, rec := newProvider(t)
	ctx := context.Background()
	seedAccount(t, pool, "acc_a")
	first, err := p.Customer(ctx, "acc_a")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(first, "cus_") {
		t.Fatalf("customer id %q", first)
	}
	again, err := p.Customer(ctx, "acc_a")
	if err != nil || again != first {
		t.Fatalf("second call: %q, %v; want %q", again, err, first)
	}
	var stored string
	if err := pool.QueryRow(ctx, `SELECT stripe_customer_id FROM accounts WHERE id = 'acc_a'`).Scan(&stored); err != nil || stored != first {
		t.Fatalf("stored %q, %v", stored, err)
	}
	if want := []string{"POST /v1/customers berth-customer-acc_a"}; strings.Join(rec.seen, "|") != strings.Join(want, "|") {
		t.Fatalf("requests %q, want %q", rec.seen, want)
	}
	secret, err := p.SetupIntent(ctx, "acc_a")
	if err != nil || !strings.Contains(secret, "_secret_") {
		t.Fatalf("setup intent client secret %q, %v", secret, err)
	}
}

func TestWebhookMarksPaymentMethodOnceAndRefusesBadSignatures(t *testing.T) {
	p, pool, _ := newProvider(t)
	ctx := context.Background()
	seedAccount(t, pool, "acc_a")
	cust, err := p.Customer(ctx, "acc_a")
	if err != nil {
		t.Fatal(err)
	}
	hasMethod := func() bool {
		var ok bool
		if err := pool.QueryRow(ctx, `SELECT payment_method_at IS NOT NULL FROM accounts WHERE id = 'acc_a'`).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	body, _ := signed(t, "whsec_someone_else", "evt_forged", "setup_intent.succeeded", cust)
	if _, err := p.HandleWebhook(ctx, body, "t=1,v1=00"); !errors.Is(err, ErrSignature) {
		t.Fatalf("unsigned event: %v, want ErrSignature", err)
	}
	body, hdr := signed(t, "whsec_someone_else", "evt_forged", "setup_intent.succeeded", cust)
	if _, err := p.HandleWebhook(ctx, body, hdr); !errors.Is(err, ErrSignature) {
		t.Fatalf("event signed with another secret: %v, want ErrSignature", err)
	}
	if hasMethod() {
		t.Fatal("a forged event marked a payment method")
	}
	body, hdr = signed(t, testSecret, "evt_1", "setup_intent.succeeded", cust)
	for range 2 { // Stripe delivers at least once
		if typ, err := p.HandleWebhook(ctx, body, hdr); err != nil || typ != "setup_intent.succeeded" {
			t.Fatalf("HandleWebhook: %q, %v", typ, err)
		}
	}
	if !hasMethod() {
		t.Fatal("setup_intent.succeeded did not mark the payment method")
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM stripe_events WHERE id = 'evt_1'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("stripe_events: %d, %v", n, err)
	}
}

func TestPaymentFailureGraceThenFreeBounds(t *testing.T) {
	p, pool, _ := newProvider(t)
	ctx := context.Background()
	seedAccount(t, pool, "acc_a")
	seedAccount(t, pool, "acc_b") // pays: untouched
	seedTenant(t, pool, "acc_a", "ten_a1", "pro")
	seedTenant(t, pool, "acc_b", "ten_b1", "pro")
	cust, err := p.Customer(ctx, "acc_a")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN berth_quotas"); err != nil {
		t.Fatal(err)
	}

	body, hdr := signed(t, testSecret, "evt_fail", "invoice.payment_failed", cust)
	if _, err := p.HandleWebhook(ctx, body, hdr); err != nil {
		t.Fatal(err)
	}
	var state string
	var until time.Time
	if err := pool.QueryRow(ctx, `SELECT payment_state, grace_until FROM accounts WHERE id = 'acc_a'`).Scan(&state, &until); err != nil || state != "grace" {
		t.Fatalf("after payment_failed: %q, %v", state, err)
	}
	free, _ := plan.Lookup("free")
	pro, _ := plan.Lookup("pro")
	if n, err := p.EnforceGrace(ctx, until.Add(-time.Second), free.Max); err != nil || n != 0 {
		t.Fatalf("within grace: capped %d, %v", n, err)
	}
	if n, err := p.EnforceGrace(ctx, until, free.Max); err != nil || n != 1 {
		t.Fatalf("grace over: capped %d, %v", n, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	note, err := conn.Conn().WaitForNotification(wctx)
	if err != nil || note.Payload != "ten_a1" {
		t.Fatalf("berth_quotas notification: %+v, %v", note, err)
	}
	quotaOf := func(tid string) (q quotas.Quotas) {
		dest := []any{}
		for _, f := range quotas.Fields {
			dest = append(dest, f.Get(&q))
			_ = f
		}
		names := make([]string, len(quotas.Fields))
		for i, f := range quotas.Fields {
			names[i] = f.Name
		}
		if err := pool.QueryRow(ctx, `SELECT `+strings.Join(names, ", ")+` FROM quotas WHERE tenant_id = $1`, tid).Scan(dest...); err != nil {
			t.Fatal(err)
		}
		return q
	}
	capped := quotaOf("ten_a1")
	if err := free.Check(capped); err != nil {
		t.Fatalf("capped quotas outside the free plan's bounds: %v", err)
	}
	for _, f := range quotas.Fields { // each the smaller of pro's default and free's bound
		if got, want := *f.Get(&capped), min(*f.Get(&pro.Defaults), *f.Get(&free.Max)); got != want {
			t.Errorf("%s = %d, want %d", f.Name, got, want)
		}
	}
	if quotaOf("ten_b1") != pro.Defaults {
		t.Fatal("another account's tenant was capped")
	}
	if err := pool.QueryRow(ctx, `SELECT payment_state FROM accounts WHERE id = 'acc_a'`).Scan(&state); err != nil || state != "capped" {
		t.Fatalf("state %q, %v", state, err)
	}
}

func TestPushFinalUsesIdempotencyKeysOnce(t *testing.T) {
	p, pool, rec := newProvider(t)
	ctx := context.Background()
	seedAccount(t, pool, "acc_a")
	month := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	now := time.Date(2026, 11, 1, 2, 0, 0, 0, time.UTC)
	if _, err := pool.Exec(ctx, `INSERT INTO invoices (id, account_id, month, status, currency, total_cents, created_at, updated_at)
		VALUES ('inv_1', 'acc_a', $1, 'draft', 'usd', 5100, $2, $2)`, month, now); err != nil {
		t.Fatal(err)
	}
	for i, amt := range []int64{4900, 0, 200} {
		if _, err := pool.Exec(ctx, `INSERT INTO invoice_lines (invoice_id, line, tenant_id, tenant_slug, plan, meter, description, unit, quantity, included, billable, amount_cents)
			VALUES ('inv_1', $1, 'ten_1', 'one', 'pro', $2, 'line', 'u', 1, 0, 1, $3)`, i+1, []string{"base", "messages", "transfer"}[i], amt); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE invoices SET status = 'final', number = 7, finalized_at = $1 WHERE id = 'inv_1'`, now); err != nil {
		t.Fatal(err)
	}
	// Nothing to charge: a final invoice of 0 is not pushed.
	if _, err := pool.Exec(ctx, `INSERT INTO invoices (id, account_id, month, status, number, currency, total_cents, created_at, updated_at, finalized_at)
		VALUES ('inv_0', 'acc_a', $1, 'final', 6, 'usd', 0, $2, $2, $2)`, month.AddDate(0, -1, 0), now); err != nil {
		t.Fatal(err)
	}
	if n, err := p.PushFinal(ctx); err != nil || n != 1 {
		t.Fatalf("PushFinal: %d, %v", n, err)
	}
	var sid string
	if err := pool.QueryRow(ctx, `SELECT stripe_invoice_id FROM invoice_payments WHERE invoice_id = 'inv_1'`).Scan(&sid); err != nil || !strings.HasPrefix(sid, "in_") {
		t.Fatalf("invoice_payments: %q, %v", sid, err)
	}
	want := []string{
		"POST /v1/customers berth-customer-acc_a",
		"POST /v1/invoices berth-invoice-inv_1",
		"POST /v1/invoiceitems berth-invoice-inv_1-line-1",
		"POST /v1/invoiceitems berth-invoice-inv_1-line-3",
		"POST /v1/invoices/" + sid + "/finalize berth-invoice-inv_1-finalize",
	}
	if strings.Join(rec.seen, "\n") != strings.Join(want, "\n") {
		t.Fatalf("requests:\n%s\nwant:\n%s", strings.Join(rec.seen, "\n"), strings.Join(want, "\n"))
	}
	if n, err := p.PushFinal(ctx); err != nil || n != 0 {
		t.Fatalf("second PushFinal: %d, %v (want nothing pushed twice)", n, err)
	}
}
