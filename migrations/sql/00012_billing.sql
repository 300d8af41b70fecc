-- +goose Up
-- Billing (docs/billing.md): monthly meters and invoices, written by the
-- billing worker (billing/cmd/billing), one leader at a time under a Postgres
-- advisory lock. Money is integer cents; quantities are exact units
-- (messages, connection-seconds, byte-seconds, bytes).
--
-- A deleted tenant's plan is kept with its tombstone, so its last month can
-- still be rated (NULL for tenants deleted before this migration: rated as
-- free).
ALTER TABLE deleted_tenants ADD COLUMN plan text;

-- billing_meters: a tenant's metered usage in a UTC calendar month, with the
-- account and plan it is billed to. Each row is recomputed from the source
-- rows (usage minute rows; usage_hourly before retention's kept_from) in one
-- statement and replaced, never added to: running it twice, or after a killed
-- run, gives the same row. Account meters are the sum over its tenants
-- (billing_account_meters). No foreign keys: usage outlives its tenant.
CREATE TABLE billing_meters (
    tenant_id           text NOT NULL,
    month               timestamptz NOT NULL CHECK (date_trunc('month', month, 'UTC') = month),
    account_id          text NOT NULL,
    tenant_slug         text NOT NULL,
    plan                text NOT NULL,
    active_seconds      bigint NOT NULL CHECK (active_seconds >= 0), -- the tenant's existence within the month
    messages            bigint NOT NULL, -- messages published (usage.messages_in)
    connection_seconds  bigint NOT NULL,
    stored_byte_seconds bigint NOT NULL, -- per minute row: stored_bytes × 60
    transfer_bytes      bigint NOT NULL, -- bytes_in + bytes_out
    computed_at         timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, month)
);
CREATE INDEX billing_meters_account ON billing_meters (account_id, month);

CREATE VIEW billing_account_meters AS
SELECT account_id, month, sum(messages)::bigint AS messages, sum(connection_seconds)::bigint AS connection_seconds,
       sum(stored_byte_seconds)::bigint AS stored_byte_seconds, sum(transfer_bytes)::bigint AS transfer_bytes,
       max(computed_at) AS computed_at
FROM billing_meters GROUP BY account_id, month;

-- billing_months: UTC months whose invoices are all final. The worker bills
-- every month after the last closed one (the first time: from the month of
-- the earliest tenant), so an outage of any length loses no month.
CREATE TABLE billing_months (
    month     timestamptz PRIMARY KEY CHECK (date_trunc('month', month, 'UTC') = month),
    closed_at timestamptz NOT NULL
);

-- invoices: one document per account and month of kind 'invoice', a draft
-- (the estimate, recomputed while the month runs) until it is finalized after
-- the month's end: then it gets the next number and it and its lines are
-- immutable (triggers below). Credits and corrections are new documents
-- (kind 'credit' / 'correction', referring to the invoice they amend), never
-- edits. Payment state lives outside these rows. No foreign key to accounts:
-- an issued invoice outlives its account.
CREATE TABLE invoices (
    id           text PRIMARY KEY,
    account_id   text NOT NULL,
    month        timestamptz NOT NULL CHECK (date_trunc('month', month, 'UTC') = month),
    kind         text NOT NULL DEFAULT 'invoice' CHECK (kind IN ('invoice', 'credit', 'correction')),
    amends       text REFERENCES invoices (id),
    status       text NOT NULL CHECK (status IN ('draft', 'final')),
    number       bigint UNIQUE,
    currency     text NOT NULL,
    total_cents  bigint NOT NULL,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    finalized_at timestamptz,
    CHECK ((status = 'final') = (number IS NOT NULL AND finalized_at IS NOT NULL)),
    CHECK ((kind = 'invoice') = (amends IS NULL))
);
CREATE UNIQUE INDEX invoices_account_month ON invoices (account_id, month) WHERE kind = 'invoice';
CREATE INDEX invoices_account_list ON invoices (account_id, month DESC, id DESC);

-- invoice_lines: numbered from 1 within an invoice; per tenant, its base fee
-- (prorated to the second) and then one line per meter. A rate is
-- rate_cents per rate_per units of the billable quantity; NULL on the free
-- plan (hard caps, no overage).
CREATE TABLE invoice_lines (
    invoice_id  text NOT NULL REFERENCES invoices (id),
    line        integer NOT NULL CHECK (line >= 1),
    tenant_id   text NOT NULL,
    tenant_slug text NOT NULL,
    plan        text NOT NULL,
    meter       text NOT NULL CHECK (meter IN ('base', 'messages', 'connection_time', 'storage', 'transfer')),
    description text NOT NULL,
    unit        text NOT NULL,
    quantity    bigint NOT NULL CHECK (quantity >= 0),
    included    bigint NOT NULL CHECK (included >= 0),
    billable    bigint NOT NULL CHECK (billable >= 0),
    rate_cents  bigint,
    rate_per    bigint CHECK (rate_per > 0),
    amount_cents bigint NOT NULL,
    PRIMARY KEY (invoice_id, line)
);

-- +goose StatementBegin
CREATE FUNCTION invoices_final_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status = 'final' THEN
        RAISE EXCEPTION 'invoice % is final: issue a correction instead', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION invoice_lines_final_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' AND EXISTS (SELECT 1 FROM invoices WHERE id = OLD.invoice_id AND status = 'final') THEN
        RAISE EXCEPTION 'invoice % is final: its lines cannot change', OLD.invoice_id
            USING ERRCODE = 'check_violation';
    END IF;
    IF TG_OP <> 'DELETE' AND EXISTS (SELECT 1 FROM invoices WHERE id = NEW.invoice_id AND status = 'final') THEN
        RAISE EXCEPTION 'invoice % is final: its lines cannot change', NEW.invoice_id
            USING ERRCODE = 'check_violation';
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER invoices_final_immutable BEFORE UPDATE OR DELETE ON invoices
    FOR EACH ROW EXECUTE FUNCTION invoices_final_immutable();
CREATE TRIGGER invoice_lines_final_immutable BEFORE INSERT OR UPDATE OR DELETE ON invoice_lines
    FOR EACH ROW EXECUTE FUNCTION invoice_lines_final_immutable();

-- +goose Down
DROP TABLE invoice_lines, invoices;
DROP FUNCTION invoice_lines_final_immutable(), invoices_final_immutable();
DROP VIEW billing_account_meters;
DROP TABLE billing_months, billing_meters;
ALTER TABLE deleted_tenants DROP COLUMN plan;
