// Package payment is Berth's payment provider, Stripe (stripe-go): a Stripe
// customer per account, created lazily; a payment method set up with a
// SetupIntent; webhooks verified with the signing secret, which mark an
// account as having a valid payment method or move it to a grace state when
// an invoice's payment fails; final invoices pushed with idempotency keys;
// and, once an account's grace has passed, its tenants' quotas capped to the
// free plan's bounds. The broker and the gateway never import it.
package payment

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stripe/stripe-go/v82"

	"berth.dev/quotas"
)

// DefaultGrace is how long an account whose payment failed keeps its
// quotas before they are capped to the free plan's bounds.
const DefaultGrace = 7 * 24 * time.Hour

// Config says how to reach Stripe.
type Config struct {
	Key           string        // secret API key (sk_…); required
	WebhookSecret string        // endpoint signing secret (whsec_…); required to accept webhooks
	URL           string        // API base URL; empty: Stripe's. Tests point it at stripe-mock.
	Grace         time.Duration // 0: DefaultGrace
	HTTPClient    *http.Client  // nil: stripe-go's default
}

// Provider talks to Stripe on behalf of accounts stored in Postgres.
type Provider struct {
	sc     *stripe.Client
	pool   *pgxpool.Pool
	secret string
	grace  time.Duration
	log    *slog.Logger
}

// New returns a Provider, or an error when cfg has no key.
func New(pool *pgxpool.Pool, cfg Config, log *slog.Logger) (*Provider, error) {
	if cfg.Key == "" {
		return nil, errors.New("payment: no Stripe key")
	}
	bc := &stripe.BackendConfig{MaxNetworkRetries: stripe.Int64(2), LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelError}}
	if cfg.HTTPClient != nil {
		bc.HTTPClient = cfg.HTTPClient
	}
	if cfg.URL != "" {
		bc.URL = stripe.String(cfg.URL)
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	return &Provider{
		sc:   stripe.NewClient(cfg.Key, stripe.WithBackends(stripe.NewBackendsWithConfig(bc))),
		pool: pool, secret: cfg.WebhookSecret, grace: cfg.Grace, log: log,
	}, nil
}

// Customer returns the Stripe customer id of accountID, creating the
// customer the first time (idempotency key: the account id, so two
// concurrent first calls create one customer).
func (p *Provider) Customer(ctx context.Context, accountID string) (string, error) {
	var id *string
	var email string
	err := p.pool.QueryRow(ctx, `SELECT stripe_customer_id, email FROM accounts WHERE id = $1`, accountID).Scan(&id, &email)
	if err != nil {
		return "", fmt.Errorf("payment: account %s: %w", accountID, err)
	}
	if id != nil {
		return *id, nil
	}
	params := &stripe.CustomerCreateParams{Email: stripe.String(email)}
	params.AddMetadata("berth_account_id", accountID)
	params.SetIdempotencyKey("berth-customer-" + accountID)
	c, err := p.sc.V1Customers.Create(ctx, params)
	if err != nil {
		return "", fmt.Errorf("payment: create customer: %w", err)
	}
	var stored string
	err = p.pool.QueryRow(ctx, `UPDATE accounts SET stripe_customer_id = coalesce(stripe_customer_id, $2)
		WHERE id = $1 RETURNING stripe_customer_id`, accountID, c.ID).Scan(&stored)
	if err != nil {
		return "", fmt.Errorf("payment: store customer: %w", err)
	}
	return stored, nil
}

// SetupIntent starts setting up a payment method for accountID off-session
// and returns the SetupIntent's client secret, for Stripe.js to confirm.
func (p *Provider) SetupIntent(ctx context.Context, accountID string) (string, error) {
	cust, err := p.Customer(ctx, accountID)
	if err != nil {
		return "", err
	}
	si, err := p.sc.V1SetupIntents.Create(ctx, &stripe.SetupIntentCreateParams{
		Customer: stripe.String(cust), Usage: stripe.String("off_session"),
		PaymentMethodTypes: []*string{stripe.String("card")},
	})
	if err != nil {
		return "", fmt.Errorf("payment: create setup intent: %w", err)
	}
	return si.ClientSecret, nil
}

// EnforceGrace caps the quotas of every tenant of every account whose grace
// ended by now to the free plan's bounds (each quota the smaller of its
// value and the bound, announced on berth_quotas so nodes apply it live)
// and moves the account to "capped", keeping the quotas as they were
// (quota_snapshots) for invoice.paid to restore (RestoreTenants). It
// returns the accounts capped.
func (p *Provider) EnforceGrace(ctx context.Context, now time.Time, free quotas.Quotas) (int, error) {
	rows, err := p.pool.Query(ctx, `SELECT id FROM accounts WHERE payment_state = 'grace' AND grace_until <= $1`, now)
	if err != nil {
		return 0, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, err
	}
	for _, id := range ids {
		err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, `UPDATE accounts SET payment_state = 'capped', grace_until = NULL
				WHERE id = $1 AND payment_state = 'grace'`, id)
			if err != nil || tag.RowsAffected() == 0 {
				return err
			}
			if err := snapshotQuotas(ctx, tx, id); err != nil {
				return err
			}
			_, err = CapTenants(ctx, tx, id, free)
			return err
		})
		if err != nil {
			return 0, fmt.Errorf("payment: cap account %s: %w", id, err)
		}
		p.log.Info("payment grace over: tenants' quotas capped to the free plan's bounds", slog.String("account", id))
	}
	return len(ids), nil
}
