package metering

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/billing/invoice"
	"berth.dev/billing/payment"
	"berth.dev/quotas"
)

// budgetThresholds are the percentages of a budget that notify.
var budgetThresholds = []int64{80, 100}

// checkBudgets compares each budgeted account's invoice total for now's
// month with its budget and records each threshold crossed, once per month
// (budget_notifications); at 100 % with action "cap" it caps the account's
// tenants' quotas to free (NOTIFY berth_quotas, live), and for an account
// with a budget webhook it queues the notice's event (queueWebhook), in
// the same transaction. It returns the notifications recorded.
func (w *Worker) checkBudgets(ctx context.Context, now time.Time, free quotas.Quotas) (int, error) {
	month := invoice.MonthOf(now)
	rows, err := w.pool.Query(ctx, `SELECT b.account_id, b.monthly_cents, b.action, i.total_cents
		FROM budgets b JOIN invoices i ON i.account_id = b.account_id AND i.month = $1 AND i.kind = 'invoice'
		ORDER BY b.account_id`, month)
	if err != nil {
		return 0, err
	}
	type budget struct {
		account, action string
		cents, total    int64
	}
	bs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (budget, error) {
		var b budget
		return b, r.Scan(&b.account, &b.cents, &b.action, &b.total)
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, b := range bs {
		for _, pct := range budgetThresholds {
			if b.total*100 < b.cents*pct { // exact: integers only
				break
			}
			capNow := pct == 100 && b.action == "cap"
			recorded := false
			err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
				tag, err := tx.Exec(ctx, `INSERT INTO budget_notifications (account_id, month, percent, total_cents, budget_cents, capped, created_at)
					VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING`, b.account, month, pct, b.total, b.cents, capNow, now)
				if err != nil || tag.RowsAffected() == 0 {
					return err
				}
				recorded = true
				if err := queueWebhook(ctx, tx, b.account, month, pct, b.total, b.cents, b.action, capNow, now); err != nil {
					return err
				}
				if !capNow {
					return nil
				}
				_, err = payment.CapTenants(ctx, tx, b.account, free)
				return err
			})
			if err != nil {
				return n, fmt.Errorf("metering: budget of %s: %w", b.account, err)
			}
			if !recorded {
				continue
			}
			n++
			w.log.Info("budget threshold reached", slog.String("account_id", b.account), slog.Int64("percent", pct),
				slog.Int64("total_cents", b.total), slog.Int64("budget_cents", b.cents), slog.Bool("capped", capNow))
		}
	}
	return n, nil
}

// BudgetEvent is the body of a budget webhook (docs/billing.md, "Budget
// webhooks").
type BudgetEvent struct {
	ID        string          `json:"id"`
	Type      string          `json:"type"` // budget.threshold_reached
	CreatedAt time.Time       `json:"created_at"`
	AccountID string          `json:"account_id"`
	Data      BudgetEventData `json:"data"`
}

// BudgetEventData is a budget notice.
type BudgetEventData struct {
	Month       string `json:"month"` // UTC calendar month, YYYY-MM
	Percent     int64  `json:"percent"`
	TotalCents  int64  `json:"total_cents"`
	BudgetCents int64  `json:"budget_cents"`
	Currency    string `json:"currency"`
	Action      string `json:"action"` // the budget's: notify or cap
	Capped      bool   `json:"capped"` // this notice capped the tenants' quotas
}

// queueWebhook queues the event of a budget notice for the account's
// webhook, if it has one, in tx (the notice's own transaction: recorded
// once, queued once). internal/webhook delivers it.
func queueWebhook(ctx context.Context, tx pgx.Tx, account string, month time.Time, pct, total, budget int64, action string, capped bool, now time.Time) error {
	ev := BudgetEvent{ID: "evt_" + newID()[len("inv_"):], Type: "budget.threshold_reached", CreatedAt: now, AccountID: account,
		Data: BudgetEventData{Month: month.Format("2006-01"), Percent: pct, TotalCents: total, BudgetCents: budget,
			Currency: "usd", Action: action, Capped: capped}}
	body, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO budget_webhook_deliveries (event_id, account_id, month, percent, body, next_attempt_at, created_at)
		SELECT $1, account_id, $2, $3, $4, $5, $5 FROM budget_webhooks WHERE account_id = $6`, ev.ID, month, pct, string(body), now, account)
	return err
}
