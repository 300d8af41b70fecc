package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/billing/internal/metering"
	"berth.dev/billing/invoice"
)

// credit is the operator's command for giving part of an issued invoice
// back:
//
//	billing credit -invoice inv_… -amount-cents 1500 -reason "outage on 12 March"
//
// It issues a credit note (a new document of kind credit, numbered in the
// invoices' sequence, amending the invoice or correction named) with one
// line, the reason, for minus the amount. It refuses a credit larger than
// what remains of the document after its earlier credits, and names the
// amounts. With payment through Stripe, the leading billing worker's next
// run turns it into a Stripe credit note on the amended document's Stripe
// invoice. DATABASE_URL fills -database-url.
func credit(args []string, getenv func(string) string, now func() time.Time, out io.Writer) error {
	fs := flag.NewFlagSet("billing credit", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `Usage: billing credit -invoice ID -amount-cents N -reason TEXT

Issues a credit note amending an issued invoice or correction.

Example:
  DATABASE_URL=postgres://… billing credit -invoice inv_abc -amount-cents 1500 -reason "outage on 12 March"`)
		fs.PrintDefaults()
	}
	dbURL := fs.String("database-url", getenv("DATABASE_URL"), "Postgres URL (DATABASE_URL)")
	id := fs.String("invoice", "", "the issued invoice or correction to credit (inv_…)")
	cents := fs.Int64("amount-cents", 0, "the amount to give back, in cents of the invoice's currency")
	reason := fs.String("reason", "", fmt.Sprintf("why, printed on the credit note's one line: printable text, at most %d characters", metering.MaxReason))
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("credit: unexpected argument %q", fs.Arg(0))
	}
	if *dbURL == "" || *id == "" || *cents <= 0 || *reason == "" {
		return errors.New("credit: -database-url (DATABASE_URL), -invoice, a positive -amount-cents and -reason are required")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, *dbURL)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer conn.Close(ctx)
	c, err := metering.Credit(ctx, conn, *id, *cents, *reason, now().UTC())
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "issued: Credit note %d (%s), %s, amends %s (%s); %s remains of it\n", c.Number, c.ID,
		invoice.Money(c.TotalCents, c.Currency), c.AmendsTitle, c.Amends, invoice.Money(c.RemainingCents, c.Currency))
	return err
}
