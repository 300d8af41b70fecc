package store

import (
	"context"

	"github.com/jackc/pgx/v5"

	"berth.dev/billing/invoice"
	"berth.dev/billing/plan"
)

// Invoices are written by the billing worker (billing/cmd/billing); the API
// only reads them.

// invoiceColumns are read from invoices i LEFT JOIN invoices a ON a.id =
// i.amends: a credit's or correction's amended document gives its number
// and kind.
const invoiceColumns = `i.id, i.account_id, i.kind, i.amends, a.number, coalesce(a.kind, ''), i.status, i.number, i.month,
	i.currency, i.total_cents, i.created_at, i.updated_at, i.finalized_at`

const invoicesFrom = ` FROM invoices i LEFT JOIN invoices a ON a.id = i.amends `

func scanInvoice(row pgx.Row) (invoice.Invoice, error) {
	var in invoice.Invoice
	err := row.Scan(&in.ID, &in.AccountID, &in.Kind, &in.Amends, &in.AmendsNumber, &in.AmendsKind, &in.Status, &in.Number,
		&in.Month, &in.Currency, &in.TotalCents, &in.CreatedAt, &in.UpdatedAt, &in.FinalizedAt)
	in.Month, in.CreatedAt, in.UpdatedAt = in.Month.UTC(), in.CreatedAt.UTC(), in.UpdatedAt.UTC()
	if in.FinalizedAt != nil {
		*in.FinalizedAt = in.FinalizedAt.UTC()
	}
	return in, err
}

// ListInvoices pages through an account's invoices, credit notes and
// corrections, newest month first (the running month's draft first),
// without their lines. The cursor's At
// is the month.
func (s *Store) ListInvoices(ctx context.Context, accountID string, p Page) ([]invoice.Invoice, *Cursor, error) {
	at, id := p.afterArgs()
	rows, err := s.pool.Query(ctx,
		`SELECT `+invoiceColumns+invoicesFrom+`
		 WHERE i.account_id = $1 AND ($2::timestamptz IS NULL OR (i.month, i.id) < ($2, $3::text))
		 ORDER BY i.month DESC, i.id DESC LIMIT $4`, accountID, at, id, p.Limit+1)
	if err != nil {
		return nil, nil, classify("list invoices", err)
	}
	ins, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (invoice.Invoice, error) { return scanInvoice(row) })
	if err != nil {
		return nil, nil, classify("list invoices", err)
	}
	ins, next := trim(ins, p.Limit, func(in invoice.Invoice) Cursor { return Cursor{At: in.Month, ID: in.ID} })
	return ins, next, nil
}

// GetInvoice returns the account's invoice id with its lines (ErrNotFound
// for another account's).
func (s *Store) GetInvoice(ctx context.Context, accountID, id string) (invoice.Invoice, error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return invoice.Invoice{}, classify("get invoice", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	in, err := scanInvoice(tx.QueryRow(ctx, `SELECT `+invoiceColumns+invoicesFrom+`WHERE i.id = $1 AND i.account_id = $2`, id, accountID))
	if err != nil {
		return in, classify("get invoice", err)
	}
	rows, err := tx.Query(ctx, `SELECT line, tenant_id, tenant_slug, plan, meter, description, unit, quantity, included, billable,
		rate_cents, rate_per, amount_cents, amends_line FROM invoice_lines WHERE invoice_id = $1 ORDER BY line`, id)
	if err != nil {
		return in, classify("get invoice", err)
	}
	in.Lines, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (invoice.Line, error) {
		var (
			l      invoice.Line
			rc, rp *int64
		)
		err := row.Scan(&l.Line, &l.TenantID, &l.TenantSlug, &l.Plan, &l.Meter, &l.Description, &l.Unit, &l.Quantity,
			&l.Included, &l.Billable, &rc, &rp, &l.AmountCents, &l.AmendsLine)
		if rc != nil && rp != nil {
			l.Rate = &plan.Rate{Cents: *rc, Per: *rp}
		}
		return l, err
	})
	if in.Lines == nil {
		in.Lines = []invoice.Line{}
	}
	return in, classify("get invoice", err)
}
