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
