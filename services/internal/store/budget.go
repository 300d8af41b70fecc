package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Budget is an account's monthly spend cap (docs/billing.md, "Budgets").
type Budget struct {
	MonthlyCents int64     `json:"monthly_cents"`
	Action       string    `json:"action"` // notify or cap
	UpdatedAt    time.Time `json:"updated_at"`
}

// BudgetNotice is a threshold of the budget reached in a month.
type BudgetNotice struct {
	Month       time.Time `json:"month"`
	Percent     int       `json:"percent"`
	TotalCents  int64     `json:"total_cents"`
	BudgetCents int64     `json:"budget_cents"`
	Capped      bool      `json:"capped"`
	CreatedAt   time.Time `json:"created_at"`
}

// SetBudget sets accountID's budget.
func (s *Store) SetBudget(ctx context.Context, accountID string, b Budget) (Budget, error) {
	err := s.pool.QueryRow(ctx, `INSERT INTO budgets (account_id, monthly_cents, action) VALUES ($1, $2, $3)
		ON CONFLICT (account_id) DO UPDATE SET monthly_cents = EXCLUDED.monthly_cents, action = EXCLUDED.action, updated_at = now()
		RETURNING monthly_cents, action, updated_at`, accountID, b.MonthlyCents, b.Action).Scan(&b.MonthlyCents, &b.Action, &b.UpdatedAt)
	return b, classify("set budget", err)
}

// GetBudget returns accountID's budget (ErrNotFound: none) and its latest
// notices, newest first (at most 24).
func (s *Store) GetBudget(ctx context.Context, accountID string) (Budget, []BudgetNotice, error) {
	var b Budget
	err := s.pool.QueryRow(ctx, `SELECT monthly_cents, action, updated_at FROM budgets WHERE account_id = $1`, accountID).
		Scan(&b.MonthlyCents, &b.Action, &b.UpdatedAt)
	if err != nil {
		return b, nil, classify("budget", err)
	}
	rows, err := s.pool.Query(ctx, `SELECT month, percent, total_cents, budget_cents, capped, created_at
		FROM budget_notifications WHERE account_id = $1 ORDER BY month DESC, percent DESC LIMIT 24`, accountID)
	if err != nil {
		return b, nil, classify("budget notices", err)
	}
	ns, err := pgx.CollectRows(rows, pgx.RowToStructByPos[BudgetNotice])
	return b, ns, classify("budget notices", err)
}

// DeleteBudget removes accountID's budget (ErrNotFound: none). Its notices
// stay: quotas a cap lowered stay where they are, and a budget set again in
// the same month does not notify twice for a threshold already noticed.
func (s *Store) DeleteBudget(ctx context.Context, accountID string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM budgets WHERE account_id = $1`, accountID)
	if err == nil && tag.RowsAffected() == 0 {
		err = ErrNotFound
	}
	return classify("delete budget", err)
}

// BudgetWebhook is where an account's budget notices are POSTed, signed
// with Secret (docs/billing.md, "Budget webhooks"). Secret is never
// marshalled: the API shows it once, in the answer that made it.
type BudgetWebhook struct {
	URL       string    `json:"url"`
	Secret    string    `json:"-"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// BudgetDelivery is a budget notice's webhook delivery.
type BudgetDelivery struct {
	EventID     string     `json:"event_id"`
	Month       time.Time  `json:"month"`
	Percent     int        `json:"percent"`
	State       string     `json:"state"` // pending, delivered, failed
	Attempts    int        `json:"attempts"`
	LastStatus  *int       `json:"last_status"`
	LastError   *string    `json:"last_error"`
	DeliveredAt *time.Time `json:"delivered_at"`
	CreatedAt   time.Time  `json:"created_at"`
}

// SetBudgetWebhook sets accountID's budget webhook URL. secret is the
// signing secret of a new webhook, and replaces the current one only with
// rotate.
func (s *Store) SetBudgetWebhook(ctx context.Context, accountID, url, secret string, rotate bool) (BudgetWebhook, error) {
	var h BudgetWebhook
	err := s.pool.QueryRow(ctx, `INSERT INTO budget_webhooks (account_id, url, secret) VALUES ($1, $2, $3)
		ON CONFLICT (account_id) DO UPDATE SET url = EXCLUDED.url, updated_at = now(),
			secret = CASE WHEN $4 THEN EXCLUDED.secret ELSE budget_webhooks.secret END
		RETURNING url, secret, created_at, updated_at`, accountID, url, secret, rotate).
		Scan(&h.URL, &h.Secret, &h.CreatedAt, &h.UpdatedAt)
	return h, classify("set budget webhook", err)
}

// GetBudgetWebhook returns accountID's budget webhook (ErrNotFound: none)
// and its latest deliveries, newest first (at most 10).
func (s *Store) GetBudgetWebhook(ctx context.Context, accountID string) (BudgetWebhook, []BudgetDelivery, error) {
	var h BudgetWebhook
	err := s.pool.QueryRow(ctx, `SELECT url, secret, created_at, updated_at FROM budget_webhooks WHERE account_id = $1`, accountID).
		Scan(&h.URL, &h.Secret, &h.CreatedAt, &h.UpdatedAt)
	if err != nil {
		return h, nil, classify("budget webhook", err)
	}
	rows, err := s.pool.Query(ctx, `SELECT event_id, month, percent, state, attempts, last_status, last_error, delivered_at, created_at
		FROM budget_webhook_deliveries WHERE account_id = $1 ORDER BY created_at DESC, event_id LIMIT 10`, accountID)
	if err != nil {
		return h, nil, classify("budget webhook deliveries", err)
	}
	ds, err := pgx.CollectRows(rows, pgx.RowToStructByPos[BudgetDelivery])
	return h, ds, classify("budget webhook deliveries", err)
}

// DeleteBudgetWebhook removes accountID's budget webhook and the
// deliveries still pending (ErrNotFound: none).
func (s *Store) DeleteBudgetWebhook(ctx context.Context, accountID string) error {
	return classify("delete budget webhook", s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM budget_webhooks WHERE account_id = $1`, accountID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		_, err = tx.Exec(ctx, `DELETE FROM budget_webhook_deliveries WHERE account_id = $1 AND state = 'pending'`, accountID)
		return err
	}))
}
