// Package invoice is Berth's invoice document: an account's charges for a
// UTC calendar month as numbered line items per tenant and meter, how those
// lines are rated from metered usage and plan prices, and how a document is
// rendered (JSON, CSV, printable HTML, PDF). The billing worker writes invoices
// (billing/internal/metering); the API reads and renders them. A credit
// note or a correction is a document of its own amending an issued one
// (Kind, Amends), rendered the same way.
//
// All money is integer cents; all quantities exact integers in their
// meter's unit. A line's amount is its billable quantity times its rate,
// rounded half up to a cent (plan.Rate.Amount); the total is the sum of the
// lines' amounts.
package invoice

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"berth.dev/billing/plan"
)

// Status of a document.
const (
	Draft = "draft" // the running month's estimate, recomputed until finalized
	Final = "final" // issued: numbered and immutable
)

// Kinds of document. An invoice is one account's month; a correction and a
// credit amend an issued document (Invoice.Amends), never edit it.
const (
	KindInvoice    = "invoice"
	KindCorrection = "correction" // usage that landed after the invoice was issued, billed
	KindCredit     = "credit"     // an amount given back by the operator (negative)
)

// Base is the meter name of a tenant's prorated plan fee line.
const Base = "base"

// Credit is the meter name of a credit's one line (no tenant; its
// description is the reason, its amount negative).
const Credit = "credit"

// Line is one numbered line item.
type Line struct {
	Line        int        `json:"line"`
	TenantID    string     `json:"tenant_id"`
	TenantSlug  string     `json:"tenant_slug"`
	Plan        string     `json:"plan"`
	Meter       string     `json:"meter"`
	Description string     `json:"description"`
	Unit        string     `json:"unit"`
	Quantity    int64      `json:"quantity"`
	Included    int64      `json:"included"`
	Billable    int64      `json:"billable"`
	Rate        *plan.Rate `json:"rate"` // nil: nothing charged (a hard-capped meter)
	AmountCents int64      `json:"amount_cents"`
	// AmendsLine is, on a correction's line, the line of the amended
	// invoice whose quantity it adds to.
	AmendsLine *int `json:"amends_line,omitempty"`
}

// Invoice is one document. Lines is nil in lists.
type Invoice struct {
	ID        string  `json:"id"`
	AccountID string  `json:"account_id"`
	Kind      string  `json:"kind"`
	Amends    *string `json:"amends"`
	// AmendsNumber and AmendsKind are the amended document's number and
	// kind (a credit may amend an invoice or a correction).
	AmendsNumber *int64     `json:"amends_number"`
	AmendsKind   string     `json:"-"`
	Status       string     `json:"status"`
	Number       *int64     `json:"number"`
	Month        time.Time  `json:"-"`
	Currency     string     `json:"currency"`
	TotalCents   int64      `json:"total_cents"`
	CreatedAt    time.Time  `json:"created_at"`
	UpdatedAt    time.Time  `json:"updated_at"`
	FinalizedAt  *time.Time `json:"finalized_at"`
	Lines        []Line     `json:"lines,omitempty"`
}

// PeriodEnd is the end of the invoice's month (exclusive).
func (in *Invoice) PeriodEnd() time.Time { return in.Month.AddDate(0, 1, 0) }

// MonthOf returns the UTC calendar month holding t.
func MonthOf(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// TenantUsage is a tenant's metered plan period within the month (a
// tenant that changed plans has one per plan period): what Rate turns into
// lines.
type TenantUsage struct {
	TenantID    string
	Slug        string
	Plan        string
	PeriodStart time.Time // within the month, whole seconds
	// ActiveSeconds is the period's length: how long the tenant was on
	// Plan within the month.
	ActiveSeconds int64
	Usage         map[plan.Meter]int64
}

var descriptions = map[plan.Meter]string{
	plan.Messages:       "Messages published",
	plan.ConnectionTime: "Connection time",
	plan.Storage:        "Message storage",
	plan.Transfer:       "Data transfer (in and out)",
}

// ErrCurrency reports tenants on plans priced in different currencies.
var ErrCurrency = errors.New("invoice: plans in different currencies")

// Rate rates the month's usage of an account's tenants: per tenant (by id)
// and plan period (by start), the period's plan fee prorated to the second
// (the plan's monthly price × the period's seconds / the month's seconds)
// and then one line per meter: the period's usage beyond the plan's
// included amount, itself prorated the same way (plan.Prorate), at its
// overage rate. Lines are numbered from 1. It returns the lines, their
// total and the currency.
func Rate(month time.Time, tenants []TenantUsage) ([]Line, int64, string, error) {
	tenants = slices.Clone(tenants)
	slices.SortFunc(tenants, func(a, b TenantUsage) int {
		if c := strings.Compare(a.TenantID, b.TenantID); c != 0 {
			return c
		}
		return a.PeriodStart.Compare(b.PeriodStart)
	})
	end := month.AddDate(0, 1, 0)
	secs := int64(end.Sub(month) / time.Second)
	var (
		lines    []Line
		total    int64
		currency string
	)
	add := func(l Line) {
		l.Line = len(lines) + 1
		lines = append(lines, l)
		total += l.AmountCents
	}
	for _, t := range tenants {
		p, err := plan.PriceOf(t.Plan)
		if err != nil {
			return nil, 0, "", fmt.Errorf("invoice: tenant %s: %w", t.TenantID, err)
		}
		if currency != "" && p.Currency != currency {
			return nil, 0, "", ErrCurrency
		}
		currency = p.Currency
		base := plan.Rate{Cents: p.MonthlyCents, Per: secs}
		amount, err := base.Amount(t.ActiveSeconds)
		if err != nil {
			return nil, 0, "", err
		}
		line := Line{TenantID: t.TenantID, TenantSlug: t.Slug, Plan: t.Plan}
		l := line
		l.Meter, l.Unit = Base, "second"
		l.Description = fmt.Sprintf("%s plan, %s (prorated to the second)", t.Plan, periodText(month, t))
		l.Quantity, l.Billable, l.Rate, l.AmountCents = t.ActiveSeconds, t.ActiveSeconds, &base, amount
		add(l)
		for _, m := range plan.Meters() {
			mp := p.Meters[m]
			q := t.Usage[m]
			l := line
			l.Meter, l.Unit, l.Description = string(m), m.Unit(), descriptions[m]
			included, err := plan.Prorate(mp.Included, t.ActiveSeconds, secs)
			if err != nil {
				return nil, 0, "", err
			}
			l.Quantity, l.Included, l.Billable = q, included, max(0, q-included)
			if mp.Overage != nil {
				r := *mp.Overage
				if l.AmountCents, err = r.Amount(l.Billable); err != nil {
					return nil, 0, "", err
				}
				l.Rate = &r
			}
			add(l)
		}
	}
	if currency == "" {
		currency = "usd"
	}
	return lines, total, currency, nil
}

// periodText names a plan period: the month when the period is all of it,
// else its UTC start and end.
func periodText(month time.Time, t TenantUsage) string {
	secs := int64(month.AddDate(0, 1, 0).Sub(month) / time.Second)
	if t.ActiveSeconds == secs {
		return month.Format("January 2006")
	}
	start := t.PeriodStart.UTC()
	if start.IsZero() {
		start = month
	}
	end := start.Add(time.Duration(t.ActiveSeconds) * time.Second)
	const f = "2 Jan 2006 15:04:05"
	return start.Format(f) + " to " + end.Format(f) + " UTC"
}
