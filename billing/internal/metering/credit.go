package metering

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"berth.dev/billing/invoice"
)

// Credits. An operator gives part of an issued document back with a
// credit (`billing credit`): a new document of kind credit amending it,
// with one line (the reason) and a negative total. The credits of a
// document never exceed its total: each is issued in a transaction holding
// the amended document's row lock, against what earlier credits left.

// Errors of Credit.
var (
	ErrNoDocument      = errors.New("metering: no such invoice")
	ErrNotCreditable   = errors.New("metering: only an issued invoice or correction can be credited")
	ErrCreditTooLarge  = errors.New("metering: the credit is larger than what remains of the invoice")
	ErrCreditMalformed = errors.New("metering: a credit needs a positive amount and a reason of printable text")
)

// MaxReason is the longest reason a credit takes, in characters: it is
// one line of the credit note (HTML, PDF, CSV) and of the Stripe credit
// note's memo.
const MaxReason = 200

// checkReason tells what is wrong with a credit's reason (trimmed), or ""
// for a good one: printable text (letters, marks, numbers, punctuation,
// symbols and spaces; no control or format characters such as a newline,
// a tab or a bidirectional override), 1 to MaxReason characters, not
// starting with '=', '+', '-' or '@' (a spreadsheet would take the CSV
// cell for a formula).
func checkReason(reason string) string {
	switch n := utf8.RuneCountInString(reason); {
	case reason == "":
		return "the reason is empty"
	case !utf8.ValidString(reason):
		return "the reason is not UTF-8"
	case n > MaxReason:
		return fmt.Sprintf("the reason has %d characters, at most %d", n, MaxReason)
	case strings.ContainsFunc(reason, func(r rune) bool { return !unicode.IsPrint(r) && r != ' ' && !unicode.Is(unicode.Zs, r) }):
		return "the reason holds a control or format character (newline, tab, …): printable text only"
	case strings.ContainsRune("=+-@", rune(reason[0])):
		return "the reason starts with '" + reason[:1] + "', which a spreadsheet reads as a formula"
	}
	return ""
}

// Credited is a credit issued.
type Credited struct {
	ID, Currency string
	Number       int64
	TotalCents   int64 // negative
	Amends       string
	AmendsTitle  string // "Invoice 7"
	// RemainingCents is what remains of the amended document after this
	// credit and the earlier ones.
	RemainingCents int64
}

// Credit issues, at now, a credit of cents amending the issued invoice or
// correction amends, with reason as its one line. It refuses a credit
// larger than what remains of the document after its earlier credits
// (ErrCreditTooLarge, naming the amounts).
func Credit(ctx context.Context, db beginner, amends string, cents int64, reason string, now time.Time) (Credited, error) {
	reason = strings.TrimSpace(reason)
	if cents <= 0 {
		return Credited{}, fmt.Errorf("%w (amount %d cents)", ErrCreditMalformed, cents)
	}
	if why := checkReason(reason); why != "" {
		return Credited{}, fmt.Errorf("%w: %s", ErrCreditMalformed, why)
	}
	var c Credited
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var (
			doc    invoice.Invoice
			number *int64
		)
		err := tx.QueryRow(ctx, `SELECT account_id, month, currency, kind, status, number, total_cents FROM invoices
			WHERE id = $1 FOR UPDATE`, amends).Scan(&doc.AccountID, &doc.Month, &doc.Currency, &doc.Kind, &doc.Status, &number, &doc.TotalCents)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: %s", ErrNoDocument, amends)
		}
		if err != nil {
			return err
		}
		doc.Number = number
		if doc.Status != invoice.Final || doc.Kind == invoice.KindCredit {
			return fmt.Errorf("%w: %s is %s", ErrNotCreditable, amends, strings.ToLower(doc.Title()))
		}
		var credited int64
		if err := tx.QueryRow(ctx, `SELECT coalesce(-sum(total_cents), 0)::bigint FROM invoices WHERE amends = $1 AND kind = 'credit'`,
			amends).Scan(&credited); err != nil {
			return err
		}
		remaining := doc.TotalCents - credited
		if cents > remaining {
			return fmt.Errorf("%w: %s asked, %s remains of %s (total %s, credited before %s)", ErrCreditTooLarge,
				invoice.Money(cents, doc.Currency), invoice.Money(remaining, doc.Currency), doc.Title(),
				invoice.Money(doc.TotalCents, doc.Currency), invoice.Money(credited, doc.Currency))
		}
		line := invoice.Line{Line: 1, Meter: invoice.Credit, Description: reason, Unit: "credit",
			Quantity: 1, Billable: 1, AmountCents: -cents}
		c = Credited{Currency: doc.Currency, TotalCents: -cents, Amends: amends, AmendsTitle: doc.Title(), RemainingCents: remaining - cents}
		c.ID, c.Number, err = issueAmendment(ctx, tx, amendment{kind: invoice.KindCredit, amends: amends, account: doc.AccountID,
			currency: doc.Currency, month: doc.Month.UTC(), lines: []invoice.Line{line}}, now)
		return err
	})
	switch {
	case err == nil:
		return c, nil
	case errors.Is(err, ErrNoDocument), errors.Is(err, ErrNotCreditable), errors.Is(err, ErrCreditTooLarge):
		return Credited{}, err
	}
	return Credited{}, fmt.Errorf("metering: credit %s: %w", amends, err)
}
