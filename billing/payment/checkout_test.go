package payment

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"
)

// A Checkout session in setup mode is made at stripe-mock for the
// account's customer (created first); return URLs that are not absolute
// http(s) are refused before anything reaches Stripe.
func TestCheckoutSession(t *testing.T) {
	p, pool, rec := newProvider(t)
	ctx := context.Background()
	seedAccount(t, pool, "acc_c")
	for _, bad := range [][2]string{{"/billing", "https://berth.example/billing"}, {"https://berth.example/ok", "javascript:alert(1)"}, {"", ""}} {
		if _, err := p.CheckoutSession(ctx, "acc_c", bad[0], bad[1]); !errors.Is(err, ErrReturnURL) {
			t.Errorf("return URLs %q: %v, want ErrReturnURL", bad, err)
		}
	}
	if len(rec.seen) != 0 {
		t.Fatalf("refused return URLs reached Stripe: %q", rec.seen)
	}
	co, err := p.CheckoutSession(ctx, "acc_c", "https://berth.example/billing?card=saved", "https://berth.example/billing")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(co.ID, "cs_") || !strings.HasPrefix(co.URL, "https://") {
		t.Fatalf("checkout session %+v", co)
	}
	if len(rec.seen) != 2 || rec.seen[0] != "POST /v1/customers berth-customer-acc_c" || !strings.HasPrefix(rec.seen[1], "POST /v1/checkout/sessions ") {
		t.Fatalf("requests %q, want the customer, then the session", rec.seen)
	}
}

// checkout.session.completed marks the payment method for a setup-mode
// session only: a payment-mode session saves no card.
func TestCheckoutCompletedMarksPaymentMethod(t *testing.T) {
	p, pool, _ := newProvider(t)
	ctx := context.Background()
	seedAccount(t, pool, "acc_c")
	cust, err := p.Customer(ctx, "acc_c")
	if err != nil {
		t.Fatal(err)
	}
	hasMethod := func() bool {
		var ok bool
		if err := pool.QueryRow(ctx, `SELECT payment_method_at IS NOT NULL FROM accounts WHERE id = 'acc_c'`).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	for _, c := range []struct {
		id, mode string
		want     bool
	}{{"evt_pay", "payment", false}, {"evt_setup", "setup", true}} {
		b, err := json.Marshal(map[string]any{"id": c.id, "object": "event", "api_version": stripe.APIVersion, "type": "checkout.session.completed",
			"created": time.Now().Unix(), "data": map[string]any{"object": map[string]any{"id": "cs_" + c.id, "object": "checkout.session",
				"mode": c.mode, "status": "complete", "customer": cust}}})
		if err != nil {
			t.Fatal(err)
		}
		sp := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: b, Secret: testSecret, Timestamp: time.Now()})
		if typ, err := p.HandleWebhook(ctx, sp.Payload, sp.Header); err != nil || typ != "checkout.session.completed" {
			t.Fatalf("%s: %q, %v", c.id, typ, err)
		}
		if got := hasMethod(); got != c.want {
			t.Fatalf("after a %s-mode session completed: payment method %v, want %v", c.mode, got, c.want)
		}
	}
}
