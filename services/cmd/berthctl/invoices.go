package main

import (
	"context"
	"fmt"
	"time"

	"berth.dev/services/apiclient"
)

// invoice is what the tables show of GET /v1/invoices[/{id}].
type invoice struct {
	ID         string     `json:"id"`
	Kind       string     `json:"kind"` // invoice, credit or correction
	Amends     *string    `json:"amends"`
	AmendsNum  *int64     `json:"amends_number"`
	Status     string     `json:"status"`
	Number     *int64     `json:"number"`
	Month      string     `json:"month"`
	Currency   string     `json:"currency"`
	TotalCents int64      `json:"total_cents"`
	UpdatedAt  time.Time  `json:"updated_at"`
	Finalized  *time.Time `json:"finalized_at"`
	Lines      []struct {
		Line        int    `json:"line"`
		TenantSlug  string `json:"tenant_slug"`
		Description string `json:"description"`
		Quantity    int64  `json:"quantity"`
		Unit        string `json:"unit"`
		AmountCents int64  `json:"amount_cents"`
	} `json:"lines"`
}

func runInvoices(ctx context.Context, e *env, args []string) error {
	return subcommand(ctx, e, "invoices", args, "list", map[string]func(context.Context, *env, []string) error{
		"list": invoicesList, "show": invoicesShow,
	})
}

func invoicesList(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "invoices list", "[--limit N | --all] [--json]", "  berthctl invoices --all").withAPI().withJSON().withPages()
	if _, err := f.parse(args, 0, 0); err != nil {
		return err
	}
	s, err := open(e, f)
	if err != nil {
		return err
	}
	items, printed, err := listPages[invoice](ctx, e, f, s, apiclient.ListInvoices, nil, nil)
	if printed || err != nil {
		return err
	}
	rows := make([][]string, 0, len(items))
	for _, iv := range items {
		rows = append(rows, []string{iv.ID, iv.Month, iv.Kind, invoiceNumber(iv.Number), amendsNumber(iv), iv.Status,
			money(iv.TotalCents, iv.Currency), when(&iv.UpdatedAt)})
	}
	table(e.stdout, []string{"ID", "MONTH", "KIND", "NUMBER", "AMENDS", "STATUS", "TOTAL", "UPDATED"}, rows)
	return nil
}

func invoicesShow(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "invoices show", "ID [--json]", "  berthctl invoices show inv_...").withAPI().withJSON()
	pos, err := f.parse(args, 1, 1)
	if err != nil {
		return err
	}
	s, err := open(e, f)
	if err != nil {
		return err
	}
	var iv invoice
	if ok, err := s.call(ctx, e, f, apiclient.GetInvoice, pos, nil, nil, &iv); !ok || err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s, %s: %s\n", documentName(iv.Kind, iv.Number), iv.Month, iv.Status)
	if iv.Amends != nil {
		// The list and the document give the amended one's id and number;
		// its kind (a credit note may amend a correction) is its own.
		var am invoice
		if err := s.api.Call(ctx, apiclient.GetInvoice, []string{*iv.Amends}, nil, nil, &am); err != nil {
			return fmt.Errorf("the document %s amends: %w", *iv.Amends, err)
		}
		fmt.Fprintf(e.stdout, "Amends %s (%s)\n", documentName(am.Kind, am.Number), am.ID)
	}
	rows := make([][]string, 0, len(iv.Lines))
	for _, l := range iv.Lines {
		rows = append(rows, []string{fmt.Sprint(l.Line), orDash(l.TenantSlug), l.Description, fmt.Sprintf("%d %s", l.Quantity, l.Unit), money(l.AmountCents, iv.Currency)})
	}
	table(e.stdout, []string{"#", "TENANT", "DESCRIPTION", "QUANTITY", "AMOUNT"}, rows)
	fmt.Fprintf(e.stdout, "Total %s\n", money(iv.TotalCents, iv.Currency))
	return nil
}

// documentName is "Invoice #7", "Credit note #9", "Correction #8", or
// "Invoice (draft)" for the running month's estimate.
func documentName(kind string, n *int64) string {
	name := map[string]string{"invoice": "Invoice", "credit": "Credit note", "correction": "Correction"}[kind]
	if name == "" {
		name = kind
	}
	if n == nil {
		return name + " (draft)"
	}
	return fmt.Sprintf("%s #%d", name, *n)
}

// amendsNumber is "#n", the number of the document a credit note or a
// correction amends; "-" for an invoice.
func amendsNumber(iv invoice) string {
	if iv.Amends == nil {
		return "-"
	}
	return invoiceNumber(iv.AmendsNum)
}

// invoiceNumber is "#n" for an issued invoice, "-" for a draft.
func invoiceNumber(n *int64) string {
	if n == nil {
		return "-"
	}
	return fmt.Sprintf("#%d", *n)
}

// money formats cents of currency, e.g. "12.34 USD".
func money(cents int64, currency string) string {
	sign := ""
	if cents < 0 {
		sign, cents = "-", -cents
	}
	return fmt.Sprintf("%s%d.%02d %s", sign, cents/100, cents%100, currency)
}
