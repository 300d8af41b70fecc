package payment

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"github.com/stripe/stripe-go/v82"
)

// ErrReturnURL is a Checkout success or cancel URL that is not an absolute
// http(s) URL.
var ErrReturnURL = errors.New("payment: a Checkout return URL must be an absolute http or https URL")

// Checkout is a Stripe Checkout session: its id, and the page on Stripe
// to send the user to.
type Checkout struct {
	ID  string `json:"id"`
	URL string `json:"url"`
}

// CheckoutSession starts a Stripe Checkout session in setup mode for
// accountID's Stripe customer (created the first time): the hosted page
// where the user saves a card for off-session use, the alternative to
// confirming a SetupIntent with Stripe.js. Stripe sends the user back to
// successURL or cancelURL; the card counts once Stripe's signed
// setup_intent.succeeded (the session's SetupIntent) or
// checkout.session.completed reaches the webhook.
func (p *Provider) CheckoutSession(ctx context.Context, accountID, successURL, cancelURL string) (Checkout, error) {
	for _, u := range []string{successURL, cancelURL} {
		if !ValidReturnURL(u) {
			return Checkout{}, ErrReturnURL
		}
	}
	cust, err := p.Customer(ctx, accountID)
	if err != nil {
		return Checkout{}, err
	}
	params := &stripe.CheckoutSessionCreateParams{
		Mode: stripe.String(string(stripe.CheckoutSessionModeSetup)), Customer: stripe.String(cust),
		PaymentMethodTypes: []*string{stripe.String("card")},
		SuccessURL:         stripe.String(successURL), CancelURL: stripe.String(cancelURL),
		SetupIntentData: &stripe.CheckoutSessionCreateSetupIntentDataParams{},
	}
	params.AddMetadata("berth_account_id", accountID)
	params.SetupIntentData.AddMetadata("berth_account_id", accountID)
	s, err := p.sc.V1CheckoutSessions.Create(ctx, params)
	if err != nil {
		return Checkout{}, fmt.Errorf("payment: create checkout session: %w", err)
	}
	return Checkout{ID: s.ID, URL: s.URL}, nil
}

// ValidReturnURL reports whether u may be a Checkout success or cancel
// URL: an absolute http(s) URL with a host, at most 2048 bytes.
func ValidReturnURL(u string) bool {
	p, err := url.Parse(u)
	return err == nil && (p.Scheme == "https" || p.Scheme == "http") && p.Host != "" && len(u) <= 2048
}
