-- +goose Up
-- Credits and corrections (docs/billing.md, "Credits and corrections"): new
-- documents amending an issued one, never edits of it.
--   - A correction (kind 'correction', written by the billing worker) bills
--     usage that landed after its invoice was issued: one line per line of
--     the invoice whose quantity grew, each naming that line (amends_line),
--     at the invoice's own rates and prorated included amounts.
--   - A credit (kind 'credit', `billing credit`, an operator's) gives back
--     part of an issued invoice or correction: one line, meter 'credit', its
--     description the reason, a negative amount.
-- Both are issued at once (final, numbered in the invoices' one sequence).
ALTER TABLE invoice_lines DROP CONSTRAINT invoice_lines_meter_check;
ALTER TABLE invoice_lines ADD CONSTRAINT invoice_lines_meter_check
    CHECK (meter IN ('base', 'messages', 'connection_time', 'storage', 'transfer', 'credit'));
ALTER TABLE invoice_lines ADD COLUMN amends_line integer CHECK (amends_line >= 1);

ALTER TABLE invoices ADD CONSTRAINT invoices_credit_negative CHECK (kind <> 'credit' OR total_cents < 0);
ALTER TABLE invoices ADD CONSTRAINT invoices_correction_positive CHECK (kind <> 'correction' OR total_cents > 0);
CREATE INDEX invoices_amends ON invoices (amends) WHERE amends IS NOT NULL;

-- credit_note_payments: a credit pushed to Stripe as a credit note on the
-- Stripe invoice of the document it amends (beside invoice_payments, which
-- records invoices and corrections pushed as Stripe invoices).
CREATE TABLE credit_note_payments (
    invoice_id            text PRIMARY KEY REFERENCES invoices (id),
    stripe_credit_note_id text NOT NULL,
    pushed_at             timestamptz NOT NULL
);

-- +goose Down
DROP TABLE credit_note_payments;
DROP INDEX invoices_amends;
ALTER TABLE invoices DROP CONSTRAINT invoices_correction_positive, DROP CONSTRAINT invoices_credit_negative;
ALTER TABLE invoice_lines DROP COLUMN amends_line;
ALTER TABLE invoice_lines DROP CONSTRAINT invoice_lines_meter_check;
ALTER TABLE invoice_lines ADD CONSTRAINT invoice_lines_meter_check
    CHECK (meter IN ('base', 'messages', 'connection_time', 'storage', 'transfer'));
