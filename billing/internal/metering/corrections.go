package metering

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/billing/invoice"
	"berth.dev/billing/plan"
)

// Corrections. Usage that lands after an account's invoice was issued (a
// node's flush retried past the grace) is billed by a correction: a new
// document amending the invoice, never an edit of it. Each run looks at the
// issued invoices of the months that ended within Config.CorrectionWindow
// whose minute usage rows are all still kept (usage's kept_from at or
// before the month's start: recomputed from hourly rollups instead, storage
// would count each hour at its largest level and grow by itself). For each
// it recomputes the month's meters and rates them as the invoice was rated;
// every meter line whose quantity is now above what the invoice and its
// earlier corrections billed for it gets a correction line: the added
// quantity, at the invoice line's own rate and prorated included amount,
// for the amount still due on the line's whole quantity (so an invoice and
// its corrections together bill exactly what one invoice with all the usage
// would have, rounding included). A correction is issued only when it
// charges something; late usage that changes no amount (within included
// amounts, on the free plan) waits in the meters until one does, and is
// then shown with it.
//
// Each invoice is corrected in one transaction holding its row lock, so two
// workers, a repeated run or a run killed mid-way (rolled back) issue one
// correction for the same late usage. A tenant whose plan periods are no
// longer those its invoice was rated on (an operator's SQL, a worker run
// with -now ahead of real time) is left out and logged: corrections bill
// late usage, not late plan changes.

// DefaultCorrectionWindow is how long after a month's end late usage is
// still billed by a correction.
const DefaultCorrectionWindow = 72 * time.Hour

// correctAll issues the corrections due at now and returns how many.
func (w *Worker) correctAll(ctx context.Context, now time.Time) (int, error) {
	rows, err := w.pool.Query(ctx, `SELECT id FROM invoices
		WHERE kind = 'invoice' AND status = 'final' AND month >= $1
		  AND month >= coalesce((SELECT kept_from FROM retention WHERE table_name = 'usage'), '-infinity')
		ORDER BY number`, invoice.MonthOf(now.Add(-w.cfg.CorrectionWindow)))
	if err != nil {
		return 0, fmt.Errorf("metering: invoices to correct: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("metering: invoices to correct: %w", err)
	}
	n := 0
	var errs []error
	for _, id := range ids {
		c, err := correct(ctx, w.pool, id, now, w.hook)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, t := range c.Skipped {
			w.log.Warn("late usage not corrected: the tenant's plan periods differ from those its invoice was rated on",
				"invoice_id", id, "tenant_id", t)
		}
		if c.ID != "" {
			n++
			w.log.Info("correction issued", "invoice_id", id, "correction_id", c.ID, "number", c.Number, "total_cents", c.TotalCents)
		}
	}
	return n, errors.Join(errs...)
}

// Correction is what Correct did: the correction issued (ID empty when
// none was due) and the tenants it left out.
type Correction struct {
	ID         string
	Number     int64
	TotalCents int64
	Skipped    []string // tenants whose plan periods changed since the invoice
}

// Correct issues, at now, a correction of the issued invoice id for the
// usage of its month that it and its earlier corrections have not billed,
// if that charges anything.
func Correct(ctx context.Context, db beginner, id string, now time.Time) (Correction, error) {
	return correct(ctx, db, id, now, nil)
}

func correct(ctx context.Context, db beginner, id string, now time.Time, h hook) (Correction, error) {
	var c Correction
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		c = Correction{}
		var (
			account, currency string
			month             time.Time
			number            int64
		)
		err := tx.QueryRow(ctx, `SELECT account_id, month, currency, number FROM invoices
			WHERE id = $1 AND kind = 'invoice' AND status = 'final' FOR UPDATE`, id).Scan(&account, &month, &currency, &number)
		if err != nil {
			return err
		}
		month = month.UTC()
		tenants, err := Meter(ctx, tx, account, month, now)
		if err != nil {
			return err
		}
		fresh, _, _, err := invoice.Rate(month, tenants)
		if err != nil {
			return err
		}
		billed, err := billedLines(ctx, tx, id)
		if err != nil {
			return err
		}
		lines, skipped, err := lateUsage(billed, fresh, number)
		if err != nil {
			return err
		}
		c.Skipped = skipped
		if h != nil {
			if err := h(ctx, tx); err != nil {
				return err
			}
		}
		for _, l := range lines {
			c.TotalCents += l.AmountCents
		}
		if c.TotalCents <= 0 {
			return nil
		}
		c.ID, c.Number, err = issueAmendment(ctx, tx, amendment{kind: invoice.KindCorrection, amends: id,
			account: account, currency: currency, month: month, lines: lines}, now)
		return err
	})
	if err != nil {
		return Correction{}, fmt.Errorf("metering: correct invoice %s: %w", id, err)
	}
	return c, nil
}

// billed is an issued invoice's line with what its corrections added to it.
type billed struct {
	invoice.Line
	addedQuantity, addedBillable, addedAmount int64
}

func billedLines(ctx context.Context, tx pgx.Tx, id string) ([]billed, error) {
	rows, err := tx.Query(ctx, `SELECT l.line, l.tenant_id, l.tenant_slug, l.plan, l.meter, l.description, l.unit,
		l.quantity, l.included, l.billable, l.rate_cents, l.rate_per, l.amount_cents,
		coalesce(c.q, 0), coalesce(c.b, 0), coalesce(c.a, 0)
	FROM invoice_lines l LEFT JOIN (
		SELECT cl.amends_line, sum(cl.quantity)::bigint AS q, sum(cl.billable)::bigint AS b, sum(cl.amount_cents)::bigint AS a
		FROM invoice_lines cl JOIN invoices c ON c.id = cl.invoice_id
		WHERE c.amends = $1 AND c.kind = 'correction' GROUP BY cl.amends_line
	) c ON c.amends_line = l.line
	WHERE l.invoice_id = $1 ORDER BY l.line`, id)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (billed, error) {
		var (
			b      billed
			rc, rp *int64
		)
		err := row.Scan(&b.Line.Line, &b.TenantID, &b.TenantSlug, &b.Plan, &b.Meter, &b.Description, &b.Unit,
			&b.Quantity, &b.Included, &b.Billable, &rc, &rp, &b.AmountCents, &b.addedQuantity, &b.addedBillable, &b.addedAmount)
		if rc != nil && rp != nil {
			b.Rate = &plan.Rate{Cents: *rc, Per: *rp}
		}
		return b, err
	})
}

// lateUsage compares an issued invoice's lines (with its corrections) with
// the month rated afresh and returns the correction's lines, numbered from
// 1, and the tenants left out because their plan periods differ. Both are
// invoice.Rate's order: per tenant (by id), per plan period (by start), a
// base line then the meters; a tenant is compared when its periods (plan
// and seconds, from the base lines) are the same on both.
func lateUsage(issued []billed, fresh []invoice.Line, number int64) ([]invoice.Line, []string, error) {
	byTenant := map[string][]billed{}
	for _, b := range issued {
		byTenant[b.TenantID] = append(byTenant[b.TenantID], b)
	}
	freshBy := map[string][]invoice.Line{}
	var order []string
	for _, l := range fresh {
		if _, ok := freshBy[l.TenantID]; !ok {
			order = append(order, l.TenantID)
		}
		freshBy[l.TenantID] = append(freshBy[l.TenantID], l)
	}
	var (
		out     []invoice.Line
		skipped []string
	)
	for _, t := range order {
		now, was := freshBy[t], byTenant[t]
		if !samePeriods(now, was) {
			skipped = append(skipped, t)
			continue
		}
		for i, f := range now {
			o := was[i]
			if f.Meter == invoice.Base {
				continue
			}
			quantity := o.Quantity + o.addedQuantity
			if f.Quantity <= quantity {
				continue
			}
			billable := max(0, f.Quantity-o.Included)
			var amount int64
			if o.Rate != nil {
				due, err := o.Rate.Amount(billable)
				if err != nil {
					return nil, nil, err
				}
				amount = due - (o.AmountCents + o.addedAmount)
			}
			added, addedBillable := f.Quantity-quantity, billable-(o.Billable+o.addedBillable)
			amended := o.Line.Line
			out = append(out, invoice.Line{Line: len(out) + 1, TenantID: o.TenantID, TenantSlug: o.TenantSlug, Plan: o.Plan,
				Meter: o.Meter, Unit: o.Unit, Description: o.Description + ": late usage (line " + strconv.Itoa(amended) +
					" of invoice " + strconv.FormatInt(number, 10) + ")",
				Quantity: added, Included: added - addedBillable, Billable: addedBillable, Rate: o.Rate,
				AmountCents: amount, AmendsLine: &amended})
		}
	}
	return out, skipped, nil
}

// samePeriods reports whether a tenant's fresh lines and issued lines have
// the same plan periods, line for line.
func samePeriods(now []invoice.Line, was []billed) bool {
	if len(now) != len(was) {
		return false
	}
	return slices.EqualFunc(now, was, func(f invoice.Line, o billed) bool {
		return f.Meter == o.Meter && f.Plan == o.Plan && (f.Meter != invoice.Base || f.Quantity == o.Quantity)
	})
}
