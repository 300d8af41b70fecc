package metering

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/billing/internal/leader"
	"berth.dev/billing/internal/webhook"
	"berth.dev/billing/invoice"
	"berth.dev/billing/plan"
	"berth.dev/quotas"
)

// LockKey is the advisory lock the leading worker holds for as long as it
// leads.
const LockKey int64 = 0x6265727468626c31 // "berthbl1"

// Config says how often the worker runs and when a month is final.
type Config struct {
	Interval time.Duration // between runs; default 1m
	// Grace is how long after a month's end its invoices stay drafts, for
	// late flushes (a node's retried or shutdown flush); default 1h.
	Grace time.Duration
	// Poll is how often a waiting worker tries for the lock; default 5s.
	Poll time.Duration
	// CorrectionWindow is how long after a month's end usage landing late
	// is billed by a correction (corrections.go); default
	// DefaultCorrectionWindow.
	CorrectionWindow time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Payments, when set, takes each run's final documents (invoices,
	// corrections, credits) to the payment provider and caps the accounts
	// whose payment grace has ended.
	Payments Payments
	// Webhooks, when set, delivers the budget notices' webhooks due
	// (*webhook.Deliverer) at each run.
	Webhooks Webhooks
}

// Webhooks sends the webhook deliveries due by now.
type Webhooks interface {
	DeliverDue(ctx context.Context, now time.Time) (webhook.Report, error)
}

// Payments is the payment provider as a run uses it (*payment.Provider).
type Payments interface {
	PushFinal(ctx context.Context) (int, error)
	EnforceGrace(ctx context.Context, now time.Time, free quotas.Quotas) (int, error)
}

func (c Config) withDefaults() Config {
	if c.Interval <= 0 {
		c.Interval = time.Minute
	}
	if c.Grace <= 0 {
		c.Grace = time.Hour
	}
	if c.Poll <= 0 {
		c.Poll = 5 * time.Second
	}
	if c.CorrectionWindow <= 0 {
		c.CorrectionWindow = DefaultCorrectionWindow
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Worker bills accounts month by month while it leads.
type Worker struct {
	pool    *pgxpool.Pool
	cfg     Config
	log     *slog.Logger
	leading atomic.Bool
	hook    hook // tests: runs inside each Bill and Correct transaction
}

// New returns a worker over pool; zero fields of cfg take their defaults.
func New(pool *pgxpool.Pool, cfg Config, log *slog.Logger) *Worker {
	return &Worker{pool: pool, cfg: cfg.withDefaults(), log: log}
}

// Leading reports whether the worker holds the lock.
func (w *Worker) Leading() bool { return w.leading.Load() }

// Run waits for the lock, then runs at once and every Interval until ctx
// ends; it releases the lock and returns nil then. A lease lost (its
// connection failed) sends it back to waiting.
func (w *Worker) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		lease, err := leader.Acquire(ctx, w.pool, LockKey, w.cfg.Poll)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return err
		}
		w.leading.Store(true)
		w.log.Info("billing worker leads")
		err = w.lead(ctx, lease)
		w.leading.Store(false)
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		lease.Release(rctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			w.log.Warn("billing worker stops leading", "err", err)
		}
	}
	w.log.Info("billing worker stopped")
	return nil
}

func (w *Worker) lead(ctx context.Context, lease *leader.Lease) error {
	t := time.NewTicker(w.cfg.Interval)
	defer t.Stop()
	for {
		if err := lease.Check(ctx); err != nil {
			return err
		}
		if r, err := w.RunOnce(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			w.log.Error("billing run failed; will retry", "err", err)
		} else {
			w.log.Debug("billing run", "drafted", r.Drafted, "finalized", r.Finalized, "corrected", r.Corrected, "months_closed", r.MonthsClosed,
				"pushed", r.Pushed, "capped", r.Capped, "budget_notices", r.BudgetNotices,
				"webhooks_delivered", r.Webhooks.Delivered, "webhooks_retried", r.Webhooks.Retried)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Report says what one run did.
type Report struct {
	Drafted, Finalized, MonthsClosed int
	Corrected                        int // corrections issued for late usage
	Pushed, Capped                   int // with Config.Payments
	BudgetNotices                    int // budget thresholds reached (budget_notifications)
	Webhooks                         webhook.Report
}

// RunOnce bills every open month: each account with a tenant within it gets
// its draft recomputed, or, once the month ended more than Grace ago, its
// invoice issued; a month whose invoices are all issued is closed; an
// issued invoice of a month ended within CorrectionWindow whose usage grew
// since gets a correction (corrections.go). It is
// safe to run concurrently with itself (each account's month is one
// transaction holding the invoice's row lock), though Run runs it only
// while leading. Then it checks budgets against the running month's drafts
// (budget.go), with Config.Webhooks sends the budget webhooks due, and,
// with Config.Payments, pushes final invoices and caps accounts whose
// payment grace ended.
func (w *Worker) RunOnce(ctx context.Context) (Report, error) {
	now := w.cfg.Now().UTC()
	r, err := w.bill(ctx, now)
	if err != nil {
		return r, err
	}
	if r.Corrected, err = w.correctAll(ctx, now); err != nil {
		return r, err
	}
	free, err := plan.Lookup("free")
	if err != nil {
		return r, err
	}
	if r.BudgetNotices, err = w.checkBudgets(ctx, now, free.Max); err != nil {
		return r, err
	}
	if w.cfg.Webhooks != nil {
		if r.Webhooks, err = w.cfg.Webhooks.DeliverDue(ctx, now); err != nil {
			return r, fmt.Errorf("metering: budget webhooks: %w", err)
		}
	}
	if w.cfg.Payments == nil {
		return r, nil
	}
	if r.Pushed, err = w.cfg.Payments.PushFinal(ctx); err != nil {
		return r, fmt.Errorf("metering: push invoices: %w", err)
	}
	if r.Capped, err = w.cfg.Payments.EnforceGrace(ctx, now, free.Max); err != nil {
		return r, fmt.Errorf("metering: payment grace: %w", err)
	}
	return r, nil
}

func (w *Worker) bill(ctx context.Context, now time.Time) (Report, error) {
	var r Report
	first, ok, err := w.firstOpenMonth(ctx, now)
	if err != nil || !ok {
		return r, err
	}
	for m := first; !m.After(now); m = m.AddDate(0, 1, 0) {
		final := !now.Before(m.AddDate(0, 1, 0).Add(w.cfg.Grace))
		accts, err := accounts(ctx, w.pool, m)
		if err != nil {
			return r, fmt.Errorf("metering: accounts of %s: %w", m.Format("2006-01"), err)
		}
		var errs []error
		for _, a := range accts {
			did, err := bill(ctx, w.pool, a, m, now, final, w.hook)
			switch {
			case err != nil:
				errs = append(errs, err)
			case did == Drafted:
				r.Drafted++
			case did == Finalized:
				r.Finalized++
				w.log.Info("invoice issued", "account_id", a, "month", m.Format("2006-01"))
			}
		}
		if err := errors.Join(errs...); err != nil {
			return r, err
		}
		if final {
			if _, err := w.pool.Exec(ctx, `INSERT INTO billing_months (month, closed_at) VALUES ($1, $2)
				ON CONFLICT DO NOTHING`, m, now); err != nil {
				return r, fmt.Errorf("metering: close %s: %w", m.Format("2006-01"), err)
			}
			r.MonthsClosed++
		}
	}
	return r, nil
}

// firstOpenMonth is the month after the last closed one, or the month of
// the earliest tenant when none is closed; ok false when there is nothing
// to bill.
func (w *Worker) firstOpenMonth(ctx context.Context, now time.Time) (time.Time, bool, error) {
	var last, earliest *time.Time
	err := w.pool.QueryRow(ctx, `SELECT (SELECT max(month) FROM billing_months),
		(SELECT min(c) FROM (SELECT min(created_at) AS c FROM tenants UNION ALL SELECT min(created_at) FROM deleted_tenants) AS t)`).
		Scan(&last, &earliest)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("metering: open months: %w", err)
	}
	switch {
	case last != nil:
		return last.UTC().AddDate(0, 1, 0), true, nil
	case earliest != nil:
		if earliest.After(now) {
			return invoice.MonthOf(now), true, nil
		}
		return invoice.MonthOf(*earliest), true, nil
	}
	return time.Time{}, false, nil
}
