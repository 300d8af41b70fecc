-- +goose Up
-- Which pushed Stripe invoices are settled (docs/billing.md, "Paid again"):
-- an account capped after its payment grace gets its quotas back only once
-- no invoice pushed to Stripe for it is still owed.
--   paid_at         when Berth learned the invoice stopped being owed; NULL
--                   while it is (open, past due, or uncollectible).
--   settled_reason  how: 'paid' (invoice.paid), 'voided' (invoice.voided: a
--                   void invoice can no longer be paid, nothing is owed), or
--                   'untracked' (pushed before this migration, when payments
--                   were not recorded: counted as settled so an account is
--                   never held back by a payment Berth could not see).
-- invoice.marked_uncollectible settles nothing: Stripe marks invoices
-- uncollectible on its own once its retries are exhausted, and such an
-- invoice can still be paid (then invoice.paid settles it).
ALTER TABLE invoice_payments
    ADD COLUMN paid_at        timestamptz,
    ADD COLUMN settled_reason text CHECK (settled_reason IN ('paid', 'voided', 'untracked')),
    ADD CONSTRAINT invoice_payments_settled CHECK ((paid_at IS NULL) = (settled_reason IS NULL));
UPDATE invoice_payments SET paid_at = now(), settled_reason = 'untracked';
CREATE INDEX invoice_payments_stripe_invoice ON invoice_payments (stripe_invoice_id);

-- +goose Down
DROP INDEX invoice_payments_stripe_invoice;
ALTER TABLE invoice_payments DROP CONSTRAINT invoice_payments_settled, DROP COLUMN settled_reason, DROP COLUMN paid_at;
