package metering

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/billing/invoice"
)

// numberLock is the transaction advisory lock (pg_advisory_xact_lock) under
// which a finalization takes the next invoice number, so numbers have no
// gaps and no repeats whoever finalizes.
const numberLock int64 = 0x6265727468696e76 // "berthinv"

var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// newID returns inv_ followed by the lowercase base32 of 10 random bytes,
// the form of every Berth id.
func newID() string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return "inv_" + strings.ToLower(idEncoding.EncodeToString(b[:]))
}

// Billed says what Bill did to an account's month.
type Billed int

const (
	Skipped   Billed = iota // the invoice was already final
	Drafted                 // the draft was written (created or recomputed)
	Finalized               // the invoice was issued
)

// hook, when set (tests), runs inside Bill's transaction after the meters
// are written and before the invoice is (in Correct's, before the
// correction is); an error aborts the transaction.
type hook func(ctx context.Context, tx pgx.Tx) error

// Bill recomputes account's meters for month and its invoice's lines in one
// transaction, at now; with finalize it also issues the invoice. A final
// invoice is left alone (Skipped).
func Bill(ctx context.Context, db beginner, account string, month, now time.Time, finalize bool) (Billed, error) {
	return bill(ctx, db, account, month, now, finalize, nil)
}

// beginner is what Bill needs of a pool or connection.
type beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

func bill(ctx context.Context, db beginner, account string, month, now time.Time, finalize bool, h hook) (Billed, error) {
	var did Billed
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		id, status, err := lockInvoice(ctx, tx, account, month, now)
		if err != nil {
			return err
		}
		if status == invoice.Final {
			did = Skipped
			return nil
		}
		tenants, err := Meter(ctx, tx, account, month, now)
		if err != nil {
			return err
		}
		if h != nil {
			if err := h(ctx, tx); err != nil {
				return err
			}
		}
		lines, total, currency, err := invoice.Rate(month, tenants)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM invoice_lines WHERE invoice_id = $1`, id); err != nil {
			return err
		}
		if err := writeLines(ctx, tx, id, lines); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE invoices SET total_cents = $2, currency = $3, updated_at = $4 WHERE id = $1`,
			id, total, currency, now); err != nil {
			return err
		}
		did = Drafted
		if !finalize {
			return nil
		}
		if _, err := issue(ctx, tx, id, now); err != nil {
			return err
		}
		did = Finalized
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("metering: bill %s %s: %w", account, month.Format("2006-01"), err)
	}
	return did, nil
}

// writeLines adds lines to the document id (a draft, or one being issued
// in this transaction).
func writeLines(ctx context.Context, tx pgx.Tx, id string, lines []invoice.Line) error {
	rows := make([][]any, len(lines))
	for i, l := range lines {
		var rc, rp *int64
		if l.Rate != nil {
			rc, rp = &l.Rate.Cents, &l.Rate.Per
		}
		rows[i] = []any{id, l.Line, l.TenantID, l.TenantSlug, l.Plan, l.Meter, l.Description, l.Unit,
			l.Quantity, l.Included, l.Billable, rc, rp, l.AmountCents, l.AmendsLine}
	}
	_, err := tx.CopyFrom(ctx, pgx.Identifier{"invoice_lines"}, []string{"invoice_id", "line", "tenant_id",
		"tenant_slug", "plan", "meter", "description", "unit", "quantity", "included", "billable",
		"rate_cents", "rate_per", "amount_cents", "amends_line"}, pgx.CopyFromRows(rows))
	return err
}

// issue issues the draft document id at now: it takes the next number
// under numberLock (one sequence, without gaps, for invoices, corrections
// and credits) and makes it final, after which neither it nor its lines
// change. It returns the number.
func issue(ctx context.Context, tx pgx.Tx, id string, now time.Time) (int64, error) {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, numberLock); err != nil {
		return 0, err
	}
	var n int64
	err := tx.QueryRow(ctx, `UPDATE invoices SET status = 'final', finalized_at = $2,
		number = (SELECT coalesce(max(number), 0) + 1 FROM invoices) WHERE id = $1 RETURNING number`, id, now).Scan(&n)
	return n, err
}

// amendment is a credit or correction to issue: a new document amending
// the issued document amends.
type amendment struct {
	kind, amends, account, currency string
	month                           time.Time
	lines                           []invoice.Line // numbered from 1
}

// issueAmendment writes a and issues it at once, within tx; it returns its
// id and number.
func issueAmendment(ctx context.Context, tx pgx.Tx, a amendment, now time.Time) (string, int64, error) {
	var total int64
	for _, l := range a.lines {
		total += l.AmountCents
	}
	id := newID()
	if _, err := tx.Exec(ctx, `INSERT INTO invoices (id, account_id, month, kind, amends, status, currency, total_cents, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, 'draft', $6, $7, $8, $8)`, id, a.account, a.month, a.kind, a.amends, a.currency, total, now); err != nil {
		return "", 0, err
	}
	if err := writeLines(ctx, tx, id, a.lines); err != nil {
		return "", 0, err
	}
	n, err := issue(ctx, tx, id, now)
	return id, n, err
}

// lockInvoice returns the id and status of account's invoice for month,
// making an empty draft if there is none, and locks its row for the
// transaction.
func lockInvoice(ctx context.Context, tx pgx.Tx, account string, month, now time.Time) (string, string, error) {
	if _, err := tx.Exec(ctx, `INSERT INTO invoices (id, account_id, month, status, currency, total_cents, created_at, updated_at)
		VALUES ($1, $2, $3, 'draft', 'usd', 0, $4, $4)
		ON CONFLICT (account_id, month) WHERE kind = 'invoice' DO NOTHING`, newID(), account, month, now); err != nil {
		return "", "", err
	}
	var id, status string
	err := tx.QueryRow(ctx, `SELECT id, status FROM invoices WHERE account_id = $1 AND month = $2 AND kind = 'invoice' FOR UPDATE`,
		account, month).Scan(&id, &status)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", fmt.Errorf("metering: invoice of %s vanished", account)
	}
	return id, status, err
}

// accounts lists the accounts with a tenant that existed within month.
func accounts(ctx context.Context, q querier, month time.Time) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT account_id FROM tenants WHERE created_at < $2
		UNION SELECT account_id FROM deleted_tenants WHERE created_at < $2 AND deleted_at >= $1
		ORDER BY 1`, month, month.AddDate(0, 1, 0))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}
