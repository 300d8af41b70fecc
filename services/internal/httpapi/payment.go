package httpapi

import (
	"context"
	"errors"
	"io"
	"net/http"

	"berth.dev/billing/payment"
)

// Payments is the payment provider as the API uses it (*payment.Provider);
// nil in Options: payment disabled (docs/billing.md, "Payment").
type Payments interface {
	SetupIntent(ctx context.Context, accountID string) (string, error)
	CheckoutSession(ctx context.Context, accountID, successURL, cancelURL string) (payment.Checkout, error)
	HandleWebhook(ctx context.Context, payload []byte, signature string) (string, error)
}

var errPaymentDisabled = errors.New("httpapi: payment is disabled")

// maxWebhookBody bounds a Stripe event's body (Stripe's are a few KiB).
const maxWebhookBody = 256 << 10

// setupIntent answers POST /v1/billing/setup-intent: the client secret of
// a new SetupIntent for the account's Stripe customer (created the first
// time), which the dashboard confirms with Stripe.js. Stripe then calls the
// webhook, and the account has a valid payment method.
func (a *api) setupIntent(w http.ResponseWriter, r *http.Request) error {
	if a.opts.Payments == nil {
		return errPaymentDisabled
	}
	secret, err := a.opts.Payments.SetupIntent(r.Context(), principalFrom(r.Context()).AccountID)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]string{"client_secret": secret})
}

// checkoutSession answers POST /v1/billing/checkout-session: a Stripe
// Checkout session in setup mode for the account's Stripe customer, the
// hosted alternative to the SetupIntent: {"id", "url"}, the page on Stripe
// to send the user to. Stripe sends the user back to success_url or
// cancel_url (absolute http(s) URLs, required) and calls the webhook once
// the card is saved.
func (a *api) checkoutSession(w http.ResponseWriter, r *http.Request) error {
	if a.opts.Payments == nil {
		return errPaymentDisabled
	}
	var req struct {
		SuccessURL string `json:"success_url"`
		CancelURL  string `json:"cancel_url"`
	}
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	var v validator
	v.check(payment.ValidReturnURL(req.SuccessURL), "success_url", "required: an absolute http or https URL (at most 2048 bytes)")
	v.check(payment.ValidReturnURL(req.CancelURL), "cancel_url", "required: an absolute http or https URL (at most 2048 bytes)")
	if err := v.err(); err != nil {
		return err
	}
	co, err := a.opts.Payments.CheckoutSession(r.Context(), principalFrom(r.Context()).AccountID, req.SuccessURL, req.CancelURL)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, co)
}

// stripeWebhook answers POST /v1/billing/webhook, Stripe's calls: 200 once
// the event is verified (Stripe-Signature, the endpoint's signing secret)
// and applied, 400 signature-invalid otherwise (Stripe retries non-2xx).
func (a *api) stripeWebhook(w http.ResponseWriter, r *http.Request) error {
	if a.opts.Payments == nil {
		return errPaymentDisabled
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxWebhookBody+1))
	if err != nil {
		return err
	}
	if len(body) > maxWebhookBody {
		return &http.MaxBytesError{Limit: maxWebhookBody}
	}
	typ, err := a.opts.Payments.HandleWebhook(r.Context(), body, r.Header.Get("Stripe-Signature"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]string{"received": typ})
}

// paymentProblem maps the payment errors to their problems (problemFor).
func paymentProblem(err error) (Problem, bool) {
	p := func(status int, slug, title, detail string) Problem {
		return Problem{Type: problemBase + slug, Title: title, Status: status, Detail: detail}
	}
	switch {
	case errors.Is(err, errPaymentDisabled):
		return p(http.StatusNotImplemented, "payment-disabled", "Payment is disabled",
			"this service runs without a payment provider; paid plans are granted by its operator"), true
	case errors.Is(err, payment.ErrSignature):
		return p(http.StatusBadRequest, "signature-invalid", "Webhook signature does not verify",
			"the Stripe-Signature header does not match the body under this endpoint's signing secret, or is too old"), true
	}
	return Problem{}, false
}
