package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"

	"berth.dev/billing/payment"
	"berth.dev/services/internal/httpapi"
	"berth.dev/testenv"
)

const webhookSecret = "whsec_httpapi_test"

// withStripe serves e's API again with payment through Stripe's
// stripe-mock and webhooks signed with webhookSecret.
func (e *env) withStripe(t *testing.T) {
	t.Helper()
	p, err := payment.New(e.pool, payment.Config{Key: "sk_test_berth", WebhookSecret: webhookSecret, URL: testenv.StripeURL(t), Grace: time.Hour},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	e.opts.Payments = p
	e.opts.Registry = prometheus.NewRegistry()
	r, err := httpapi.NewRouter(e.opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	e.srv, e.url = srv, srv.URL
}

// stripeEvent is a Stripe event of typ about customer, signed with secret
// as Stripe signs its webhooks: the body and its Stripe-Signature.
func stripeEvent(t *testing.T, secret, id, typ, customer string) ([]byte, string) {
	t.Helper()
	b, err := json.Marshal(map[string]any{"id": id, "object": "event", "api_version": stripe.APIVersion, "type": typ,
		"created": time.Now().Unix(), "data": map[string]any{"object": map[string]any{"id": "seti_" + id, "customer": customer}}})
	if err != nil {
		t.Fatal(err)
	}
	sp := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: b, Secret: secret, Timestamp: time.Now()})
	return sp.Payload, sp.Header
}

type accountOut struct {
	Plans   []string `json:"plans"`
	Payment struct {
		Enabled bool   `json:"enabled"`
		Method  bool   `json:"payment_method"`
		State   string `json:"payment_state"`
	} `json:"payment"`
}

func (e *env) account(t *testing.T, u user) accountOut {
	t.Helper()
	r := e.do(t, "GET", "/v1/account", u.key, nil)
	want(t, r, http.StatusOK)
	var a accountOut
	r.json(t, &a)
	return a
}

// With Stripe, a paid plan needs a payment method: 402 before; the
// account's SetupIntent (stripe-mock) creates its Stripe customer; a forged
// webhook is 400 and entitles nothing; Stripe's signed
// setup_intent.succeeded entitles every plan; a payment failure keeps them
// through the grace, and a capped account is back to 402.
func TestPaidPlanNeedsPaymentMethod(t *testing.T) {
	e := newEnv(t)
	e.withStripe(t)
	u := e.signup("pay@example.com")
	ctx := context.Background()
	wantNotEntitled(t, e.do(t, "PATCH", "/v1/tenants/"+u.tenantID, u.key, map[string]string{"plan": "pro"}), "pro")
	if a := e.account(t, u); !a.Payment.Enabled || a.Payment.Method || a.Payment.State != "ok" || !slices.Equal(a.Plans, []string{"free"}) {
		t.Fatalf("account before a payment method: %+v", a)
	}

	r := e.do(t, "POST", "/v1/billing/setup-intent", u.key, nil)
	want(t, r, http.StatusOK)
	var si struct {
		ClientSecret string `json:"client_secret"`
	}
	r.json(t, &si)
	if !strings.Contains(si.ClientSecret, "_secret_") {
		t.Fatalf("client secret %q", si.ClientSecret)
	}
	var customer string
	if err := e.pool.QueryRow(ctx, `SELECT stripe_customer_id FROM accounts WHERE id = $1`, u.accountID).Scan(&customer); err != nil {
		t.Fatal(err)
	}

	body, _ := stripeEvent(t, "whsec_forger", "evt_forged", "setup_intent.succeeded", customer)
	_, forged := stripeEvent(t, "whsec_forger", "evt_forged", "setup_intent.succeeded", customer)
	r = e.do(t, "POST", "/v1/billing/webhook", "", body, "Stripe-Signature", forged)
	want(t, r, http.StatusBadRequest)
	if p := r.problem(t); !strings.HasSuffix(p.Type, "/signature-invalid") {
		t.Fatalf("problem %+v", p)
	}
	wantNotEntitled(t, e.do(t, "PATCH", "/v1/tenants/"+u.tenantID, u.key, map[string]string{"plan": "pro"}), "pro")

	body, sig := stripeEvent(t, webhookSecret, "evt_ok", "setup_intent.succeeded", customer)
	want(t, e.do(t, "POST", "/v1/billing/webhook", "", body, "Stripe-Signature", sig), http.StatusOK)
	if a := e.account(t, u); !a.Payment.Method || !slices.Equal(a.Plans, []string{"free", "pro", "business"}) {
		t.Fatalf("account with a payment method: %+v", a)
	}
	want(t, e.do(t, "PATCH", "/v1/tenants/"+u.tenantID, u.key, map[string]string{"plan": "pro"}), http.StatusOK)

	body, sig = stripeEvent(t, webhookSecret, "evt_failed", "invoice.payment_failed", customer)
	want(t, e.do(t, "POST", "/v1/billing/webhook", "", body, "Stripe-Signature", sig), http.StatusOK)
	if a := e.account(t, u); a.Payment.State != "grace" || !slices.Contains(a.Plans, "business") {
		t.Fatalf("account in its grace: %+v", a)
	}
	// The billing worker caps it when the grace ends (billing/payment's tests).
	if _, err := e.pool.Exec(ctx, `UPDATE accounts SET payment_state = 'capped', grace_until = NULL WHERE id = $1`, u.accountID); err != nil {
		t.Fatal(err)
	}
	wantNotEntitled(t, e.do(t, "PATCH", "/v1/tenants/"+u.tenantID, u.key, map[string]string{"plan": "business"}), "business")
}

// Without Stripe, payment routes say payment is disabled, and an
// operator's grant (billing grant, a plan_grants row) entitles a paid plan.
func TestPaymentDisabledGrantsEntitle(t *testing.T) {
	e := newEnv(t)
	u := e.signup("grant@example.com")
	for _, path := range []string{"/v1/billing/setup-intent", "/v1/billing/webhook"} {
		r := e.do(t, "POST", path, u.key, "{}")
		want(t, r, http.StatusNotImplemented)
		if p := r.problem(t); !strings.HasSuffix(p.Type, "/payment-disabled") {
			t.Fatalf("%s: problem %+v", path, p)
		}
	}
	wantNotEntitled(t, e.do(t, "PATCH", "/v1/tenants/"+u.tenantID, u.key, map[string]string{"plan": "pro"}), "pro")
	if _, err := e.pool.Exec(context.Background(), `INSERT INTO plan_grants (account_id, plan) VALUES ($1, 'pro')`, u.accountID); err != nil {
		t.Fatal(err)
	}
	want(t, e.do(t, "PATCH", "/v1/tenants/"+u.tenantID, u.key, map[string]string{"plan": "pro"}), http.StatusOK)
	if a := e.account(t, u); a.Payment.Enabled || !slices.Equal(a.Plans, []string{"free", "pro"}) {
		t.Fatalf("account: %+v", a)
	}
	wantNotEntitled(t, e.do(t, "PATCH", "/v1/tenants/"+u.tenantID, u.key, map[string]string{"plan": "business"}), "business")
}

// Checkout: POST /v1/billing/checkout-session makes a setup-mode Stripe
// Checkout session (stripe-mock) for the account's customer and answers
// its id and page; return URLs that are missing or not absolute http(s)
// are 422 naming the field; Stripe's signed checkout.session.completed of
// that setup session entitles the account to the paid plans. Without
// payment it is 501 payment-disabled.
func TestCheckoutSessionEntitles(t *testing.T) {
	e := newEnv(t)
	u := e.signup("checkout-off@example.com")
	r := e.do(t, "POST", "/v1/billing/checkout-session", u.key, map[string]string{"success_url": "https://app.example/ok", "cancel_url": "https://app.example/no"})
	want(t, r, http.StatusNotImplemented)
	if p := r.problem(t); !strings.HasSuffix(p.Type, "/payment-disabled") {
		t.Fatalf("problem %+v", p)
	}

	e.withStripe(t)
	u = e.signup("checkout@example.com")
	r = e.do(t, "POST", "/v1/billing/checkout-session", u.key, map[string]string{"success_url": "/relative", "cancel_url": ""})
	want(t, r, http.StatusUnprocessableEntity)
	fields := map[string]bool{}
	for _, f := range r.problem(t).Errors {
		fields[f.Field] = true
	}
	if !fields["success_url"] || !fields["cancel_url"] {
		t.Fatalf("422 names %v, want success_url and cancel_url", fields)
	}
	var customer *string
	if err := e.pool.QueryRow(context.Background(), `SELECT stripe_customer_id FROM accounts WHERE id = $1`, u.accountID).Scan(&customer); err != nil || customer != nil {
		t.Fatalf("a refused request made a Stripe customer: %v %v", customer, err)
	}

	r = e.do(t, "POST", "/v1/billing/checkout-session", u.key, map[string]string{"success_url": "https://app.example/billing?card=saved", "cancel_url": "https://app.example/billing"})
	want(t, r, http.StatusOK)
	var co struct {
		ID  string `json:"id"`
		URL string `json:"url"`
	}
	r.json(t, &co)
	if !strings.HasPrefix(co.ID, "cs_") || !strings.HasPrefix(co.URL, "https://") {
		t.Fatalf("checkout session %s", r.body)
	}
	var cust string
	if err := e.pool.QueryRow(context.Background(), `SELECT stripe_customer_id FROM accounts WHERE id = $1`, u.accountID).Scan(&cust); err != nil {
		t.Fatal(err)
	}
	wantNotEntitled(t, e.do(t, "PATCH", "/v1/tenants/"+u.tenantID, u.key, map[string]string{"plan": "pro"}), "pro")
	b, err := json.Marshal(map[string]any{"id": "evt_checkout", "object": "event", "api_version": stripe.APIVersion, "type": "checkout.session.completed",
		"created": time.Now().Unix(), "data": map[string]any{"object": map[string]any{"id": co.ID, "object": "checkout.session", "mode": "setup",
			"status": "complete", "customer": cust}}})
	if err != nil {
		t.Fatal(err)
	}
	sp := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: b, Secret: webhookSecret, Timestamp: time.Now()})
	want(t, e.do(t, "POST", "/v1/billing/webhook", "", sp.Payload, "Stripe-Signature", sp.Header), http.StatusOK)
	want(t, e.do(t, "PATCH", "/v1/tenants/"+u.tenantID, u.key, map[string]string{"plan": "pro"}), http.StatusOK)
}
