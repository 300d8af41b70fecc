-- +goose Up
-- Plan periods (docs/billing.md, "Plan changes"): each tenant's plan over
-- time, one row per stretch on one plan, [starts_at, ends_at) with ends_at
-- NULL for the current one. Triggers keep it, so every writer of tenants
-- (the API's plan change, creation and deletion, operator SQL, tests)
-- records it in the same transaction:
--   - a tenant inserted opens a period at its created_at;
--   - a plan changed closes the open period and opens the next at the same
--     instant, now() truncated to the whole second (a change within the
--     second the open period started only renames its plan: no period is
--     shorter than a second);
--   - a tombstone inserted in deleted_tenants closes the open period at
--     deleted_at (or, for a tenant without periods, records its whole life).
-- The billing worker rates each period on its plan, pro rata to the second.
-- No foreign key: periods outlive the tenant, as its usage does.
CREATE TABLE tenant_plan_periods (
    tenant_id  text NOT NULL,
    account_id text NOT NULL,
    plan       text NOT NULL,
    starts_at  timestamptz NOT NULL,
    ends_at    timestamptz CHECK (ends_at >= starts_at),
    PRIMARY KEY (tenant_id, starts_at)
);
CREATE UNIQUE INDEX tenant_plan_periods_open ON tenant_plan_periods (tenant_id) WHERE ends_at IS NULL;
CREATE INDEX tenant_plan_periods_account ON tenant_plan_periods (account_id, starts_at);

INSERT INTO tenant_plan_periods (tenant_id, account_id, plan, starts_at, ends_at)
SELECT id, account_id, plan, created_at, NULL FROM tenants
UNION ALL
SELECT id, account_id, coalesce(plan, 'free'), created_at, greatest(created_at, deleted_at) FROM deleted_tenants;

-- +goose StatementBegin
CREATE FUNCTION tenant_plan_periods_record() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    at timestamptz := date_trunc('second', now());
BEGIN
    IF TG_TABLE_NAME = 'deleted_tenants' THEN
        UPDATE tenant_plan_periods SET ends_at = greatest(starts_at, NEW.deleted_at)
            WHERE tenant_id = NEW.id AND ends_at IS NULL;
        IF NOT FOUND AND NOT EXISTS (SELECT 1 FROM tenant_plan_periods WHERE tenant_id = NEW.id) THEN
            INSERT INTO tenant_plan_periods (tenant_id, account_id, plan, starts_at, ends_at)
            VALUES (NEW.id, NEW.account_id, coalesce(NEW.plan, 'free'), NEW.created_at, greatest(NEW.created_at, NEW.deleted_at));
        END IF;
    ELSIF TG_OP = 'INSERT' THEN
        INSERT INTO tenant_plan_periods (tenant_id, account_id, plan, starts_at)
        VALUES (NEW.id, NEW.account_id, NEW.plan, NEW.created_at);
    ELSIF OLD.plan IS DISTINCT FROM NEW.plan THEN
        UPDATE tenant_plan_periods SET ends_at = at
            WHERE tenant_id = NEW.id AND ends_at IS NULL AND date_trunc('second', starts_at) < at;
        IF FOUND THEN
            INSERT INTO tenant_plan_periods (tenant_id, account_id, plan, starts_at) VALUES (NEW.id, NEW.account_id, NEW.plan, at);
        ELSE
            UPDATE tenant_plan_periods SET plan = NEW.plan WHERE tenant_id = NEW.id AND ends_at IS NULL;
            IF NOT FOUND THEN
                INSERT INTO tenant_plan_periods (tenant_id, account_id, plan, starts_at) VALUES (NEW.id, NEW.account_id, NEW.plan, at);
            END IF;
        END IF;
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER tenant_plan_periods_insert AFTER INSERT ON tenants
    FOR EACH ROW EXECUTE FUNCTION tenant_plan_periods_record();
CREATE TRIGGER tenant_plan_periods_plan AFTER UPDATE OF plan ON tenants
    FOR EACH ROW EXECUTE FUNCTION tenant_plan_periods_record();
CREATE TRIGGER tenant_plan_periods_deleted AFTER INSERT ON deleted_tenants
    FOR EACH ROW EXECUTE FUNCTION tenant_plan_periods_record();

-- billing_meters: one row per plan period of a tenant within the month
-- (period_start: the period's start within the month, whole seconds;
-- active_seconds: its length), each rated on its plan. Rows from before
-- this migration had one period, from the month's start or the tenant's
-- creation.
ALTER TABLE billing_meters ADD COLUMN period_start timestamptz;
UPDATE billing_meters m SET period_start = greatest(m.month, date_trunc('second', coalesce(
    (SELECT created_at FROM tenants WHERE id = m.tenant_id),
    (SELECT created_at FROM deleted_tenants WHERE id = m.tenant_id), m.month)));
ALTER TABLE billing_meters ALTER COLUMN period_start SET NOT NULL,
    DROP CONSTRAINT billing_meters_pkey, ADD PRIMARY KEY (tenant_id, month, period_start);

-- quota_snapshots: a tenant's quotas as they were when the end of its
-- account's payment grace capped them to the free plan's bounds (to_jsonb
-- of its quotas row), so invoice.paid can restore them. Taken once per cap;
-- removed by the restore.
CREATE TABLE quota_snapshots (
    tenant_id  text PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
    account_id text NOT NULL,
    quotas     jsonb NOT NULL,
    taken_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX quota_snapshots_account ON quota_snapshots (account_id);

-- budget_webhooks: where an account wants its budget notices POSTed, and
-- the secret they are signed with (HMAC-SHA256; the worker needs it in
-- the clear to sign, as Stripe does its endpoint secrets).
-- budget_webhook_deliveries: one event per notice (account, month,
-- threshold), its body fixed when the notice was recorded, retried with
-- backoff until a 2xx or the last attempt.
CREATE TABLE budget_webhooks (
    account_id text PRIMARY KEY REFERENCES accounts (id) ON DELETE CASCADE,
    url        text NOT NULL,
    secret     text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE budget_webhook_deliveries (
    event_id        text PRIMARY KEY,
    account_id      text NOT NULL,
    month           timestamptz NOT NULL,
    percent         integer NOT NULL,
    body            text NOT NULL,
    state           text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL,
    last_status     integer,
    last_error      text,
    delivered_at    timestamptz,
    created_at      timestamptz NOT NULL,
    UNIQUE (account_id, month, percent),
    FOREIGN KEY (account_id, month, percent) REFERENCES budget_notifications (account_id, month, percent) ON DELETE CASCADE
);
CREATE INDEX budget_webhook_deliveries_due ON budget_webhook_deliveries (next_attempt_at) WHERE state = 'pending';

-- +goose Down
DROP TABLE budget_webhook_deliveries, budget_webhooks, quota_snapshots;
DELETE FROM billing_meters m WHERE period_start > (SELECT min(period_start) FROM billing_meters o
    WHERE o.tenant_id = m.tenant_id AND o.month = m.month);
ALTER TABLE billing_meters DROP CONSTRAINT billing_meters_pkey, ADD PRIMARY KEY (tenant_id, month), DROP COLUMN period_start;
DROP TRIGGER tenant_plan_periods_deleted ON deleted_tenants;
DROP TRIGGER tenant_plan_periods_plan ON tenants;
DROP TRIGGER tenant_plan_periods_insert ON tenants;
DROP FUNCTION tenant_plan_periods_record();
DROP TABLE tenant_plan_periods;
