-- +goose Up
-- Payment through Stripe (docs/billing.md, "Payment"): a Stripe customer per
-- account (created lazily), whether the account has a valid payment method
-- (set by the webhook on setup_intent.succeeded / payment_method.attached),
-- its payment state (ok; grace after invoice.payment_failed until
-- grace_until; capped once the grace has passed and its tenants' quotas were
-- capped to the free plan's bounds), plans an operator granted without
-- payment, the finalized invoices pushed to Stripe, and the webhook events
-- already handled (Stripe delivers at least once).
ALTER TABLE accounts
    ADD COLUMN stripe_customer_id text UNIQUE,
    ADD COLUMN payment_method_at  timestamptz,
    ADD COLUMN payment_state      text NOT NULL DEFAULT 'ok' CHECK (payment_state IN ('ok', 'grace', 'capped')),
    ADD COLUMN grace_until        timestamptz,
    ADD CONSTRAINT accounts_grace CHECK ((payment_state = 'grace') = (grace_until IS NOT NULL));

CREATE TABLE plan_grants (
    account_id text NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    plan       text NOT NULL,
    granted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (account_id, plan)
);

-- invoice_payments: a final invoice pushed to Stripe (invoices themselves are
-- immutable, so the push is recorded beside them).
CREATE TABLE invoice_payments (
    invoice_id        text PRIMARY KEY REFERENCES invoices (id),
    stripe_invoice_id text NOT NULL,
    pushed_at         timestamptz NOT NULL
);

CREATE TABLE stripe_events (
    id          text PRIMARY KEY,
    type        text NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now()
);

-- budgets: an account's monthly spend cap (its draft invoice's total, in
-- cents) and what reaching it does: notify only, or cap its tenants' quotas
-- to the free plan's bounds. budget_notifications: each threshold (80 and
-- 100 %) crossed in a month, once, as the billing worker saw it.
CREATE TABLE budgets (
    account_id    text PRIMARY KEY REFERENCES accounts (id) ON DELETE CASCADE,
    monthly_cents bigint NOT NULL CHECK (monthly_cents > 0),
    action        text NOT NULL CHECK (action IN ('notify', 'cap')),
    updated_at    timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE budget_notifications (
    account_id   text NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    month        timestamptz NOT NULL CHECK (date_trunc('month', month, 'UTC') = month),
    percent      integer NOT NULL CHECK (percent IN (80, 100)),
    total_cents  bigint NOT NULL,
    budget_cents bigint NOT NULL,
    capped       boolean NOT NULL,
    created_at   timestamptz NOT NULL,
    PRIMARY KEY (account_id, month, percent)
);

-- +goose Down
DROP TABLE budget_notifications;
DROP TABLE budgets;
DROP TABLE stripe_events;
DROP TABLE invoice_payments;
DROP TABLE plan_grants;
ALTER TABLE accounts DROP CONSTRAINT accounts_grace, DROP COLUMN grace_until, DROP COLUMN payment_state,
    DROP COLUMN payment_method_at, DROP COLUMN stripe_customer_id;
