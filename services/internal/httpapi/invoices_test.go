package httpapi_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"berth.dev/billing/invoice"
	"berth.dev/billing/plan"
)

// insertInvoice writes an invoice as the billing worker does: lines rated
// by invoice.Rate; final ones numbered.
func (e *env) insertInvoice(t *testing.T, id, account, tenant string, month time.Time, number int64, messages int64) invoice.Invoice {
	t.Helper()
	ctx := context.Background()
	lines, total, cur, err := invoice.Rate(month, []invoice.TenantUsage{{TenantID: tenant, Slug: "default", Plan: "pro",
		ActiveSeconds: 86400, Usage: map[plan.Meter]int64{plan.Messages: messages}}})
	if err != nil {
		t.Fatal(err)
	}
	status, num, fin := "draft", (*int64)(nil), (*time.Time)(nil)
	if number > 0 {
		f := month.AddDate(0, 1, 0).Add(time.Hour)
		status, num, fin = "final", &number, &f
	}
	if _, err := e.pool.Exec(ctx, `INSERT INTO invoices (id, account_id, month, status, number, currency, total_cents, created_at, updated_at, finalized_at)
		VALUES ($1, $2, $3, 'draft', NULL, $4, $5, $3, $3, NULL)`, id, account, month, cur, total); err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		var rc, rp *int64
		if l.Rate != nil {
			rc, rp = &l.Rate.Cents, &l.Rate.Per
		}
		if _, err := e.pool.Exec(ctx, `INSERT INTO invoice_lines (invoice_id, line, tenant_id, tenant_slug, plan, meter, description, unit,
			quantity, included, billable, rate_cents, rate_per, amount_cents) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`,
			id, l.Line, l.TenantID, l.TenantSlug, l.Plan, l.Meter, l.Description, l.Unit, l.Quantity, l.Included, l.Billable, rc, rp, l.AmountCents); err != nil {
			t.Fatal(err)
		}
	}
	if num != nil {
		if _, err := e.pool.Exec(ctx, `UPDATE invoices SET status = $2, number = $3, finalized_at = $4 WHERE id = $1`, id, status, num, fin); err != nil {
			t.Fatal(err)
		}
	}
	return invoice.Invoice{ID: id, Status: status, Number: num, TotalCents: total, Lines: lines}
}

// TestInvoices: an account lists its invoices newest first, a page at a
// time, and reads each as JSON, CSV and a printable HTML page; another
// account's invoice is 404 in every form.
func TestInvoices(t *testing.T) {
	e := newEnv(t)
	ada := e.signup("ada@example.com")
	bob := e.signup("bob@example.com")
	jan, feb := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)
	issued := e.insertInvoice(t, "inv_jan", ada.accountID, ada.tenantID, jan, 1, 5_725_806)
	e.insertInvoice(t, "inv_feb", ada.accountID, ada.tenantID, feb, 0, 10)
	e.insertInvoice(t, "inv_bob", bob.accountID, bob.tenantID, jan, 2, 5)

	type item struct {
		ID     string           `json:"id"`
		Status string           `json:"status"`
		Number *int64           `json:"number"`
		Month  string           `json:"month"`
		Total  int64            `json:"total_cents"`
		Lines  []map[string]any `json:"lines"`
	}
	var page struct {
		Items      []item `json:"items"`
		NextCursor string `json:"next_cursor"`
	}
	r := e.do(t, "GET", "/v1/invoices?limit=1", ada.key, nil)
	want(t, r, http.StatusOK)
	r.json(t, &page)
	if len(page.Items) != 1 || page.Items[0].ID != "inv_feb" || page.Items[0].Status != "draft" || page.Items[0].Lines != nil || page.NextCursor == "" {
		t.Fatalf("first page %+v", page)
	}
	r = e.do(t, "GET", "/v1/invoices?limit=1&cursor="+url.QueryEscape(page.NextCursor), ada.key, nil)
	want(t, r, http.StatusOK)
	page.NextCursor = ""
	r.json(t, &page)
	if len(page.Items) != 1 || page.Items[0].ID != "inv_jan" || page.Items[0].Number == nil || *page.Items[0].Number != 1 || page.NextCursor != "" {
		t.Fatalf("second page %+v", page)
	}

	var doc item
	r = e.do(t, "GET", "/v1/invoices/inv_jan", ada.key, nil)
	want(t, r, http.StatusOK)
	r.json(t, &doc)
	if doc.Month != "2026-01" || doc.Total != issued.TotalCents || len(doc.Lines) != len(issued.Lines) ||
		doc.Lines[1]["meter"] != "messages" || doc.Lines[1]["billable"] != 2_500_000.0 || doc.Lines[1]["amount_cents"] != 50.0 {
		t.Fatalf("invoice JSON %s", r.body)
	}

	r = e.do(t, "GET", "/v1/invoices/inv_jan.csv", ada.key, nil)
	want(t, r, http.StatusOK)
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/csv") {
		t.Fatalf("CSV Content-Type %q", ct)
	}
	rows, err := csv.NewReader(strings.NewReader(string(r.body))).ReadAll()
	if err != nil || len(rows) != len(issued.Lines)+2 || rows[2][9] != "messages" || rows[2][17] != "50" ||
		rows[len(rows)-1][9] != "total" || rows[len(rows)-1][17] != "208" {
		t.Fatalf("CSV %v (%v):\n%s", rows, err, r.body)
	}

	r = e.do(t, "GET", "/v1/invoices/inv_jan.html", ada.key, nil)
	want(t, r, http.StatusOK)
	body := string(r.body)
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") ||
		!strings.Contains(body, "Invoice 1") || !strings.Contains(body, "USD 2.08") || !strings.Contains(body, "5,725,806 messages") {
		t.Fatalf("HTML (%s):\n%s", ct, body)
	}

	r = e.do(t, "GET", "/v1/invoices/inv_jan.pdf", ada.key, nil)
	want(t, r, http.StatusOK)
	if ct, cd := r.header.Get("Content-Type"), r.header.Get("Content-Disposition"); ct != "application/pdf" ||
		cd != `inline; filename="berth-invoice-2026-01-inv_jan.pdf"` || !strings.HasPrefix(string(r.body), "%PDF-1.") {
		t.Fatalf("PDF: Content-Type %q, Content-Disposition %q, starts %q", ct, cd, r.body[:min(len(r.body), 16)])
	}
	// The PDF shows the document the JSON is: every line (its number,
	// tenant, description … amount) and the total.
	text := pdfText(t, r.body)
	for _, want := range []string{"Invoice 1", "document inv_jan", "Total " + invoice.Money(issued.TotalCents, "usd")} {
		if !strings.Contains(text, want) {
			t.Errorf("PDF text lacks %q:\n%s", want, text)
		}
	}
	for i, l := range issued.Lines {
		row := fmt.Sprintf("%d %s (%s) %s ", l.Line, l.TenantSlug, l.Plan, l.Description)
		at := strings.Index(text, row)
		end := strings.Index(text, "Total ")
		if i+1 < len(issued.Lines) {
			end = strings.Index(text, fmt.Sprintf("%d %s (", l.Line+1, l.TenantSlug))
		}
		if at < 0 || end < at || !strings.HasSuffix(text[:end], " "+invoice.Money(l.AmountCents, "usd")+" ") {
			t.Errorf("PDF has no row %q … %s:\n%s", row, invoice.Money(l.AmountCents, "usd"), text)
		}
	}

	for _, path := range []string{"/v1/invoices/inv_jan", "/v1/invoices/inv_jan.csv", "/v1/invoices/inv_jan.html",
		"/v1/invoices/inv_jan.pdf", "/v1/invoices/inv_nope", "/v1/invoices/inv_nope.pdf"} {
		r := e.do(t, "GET", path, bob.key, nil)
		want(t, r, http.StatusNotFound)
		r.problem(t)
	}
	r = e.do(t, "GET", "/v1/invoices", bob.key, nil)
	want(t, r, http.StatusOK)
	r.json(t, &page)
	if len(page.Items) != 1 || page.Items[0].ID != "inv_bob" {
		t.Fatalf("bob's list %+v", page)
	}
}

// pdfText is a PDF's text as poppler's pdftotext reads it in drawing order
// (a table row's cells one after another), white space made single
// spaces. infra/dev/tools.sh installs poppler-utils.
func pdfText(t *testing.T, pdf []byte) string {
	t.Helper()
	if _, err := exec.LookPath("pdftotext"); err != nil {
		t.Fatalf("pdftotext not found (%v): run infra/dev/tools.sh (Debian poppler-utils)", err)
	}
	cmd := exec.Command("pdftotext", "-raw", "-enc", "UTF-8", "-", "-")
	cmd.Stdin = bytes.NewReader(pdf)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pdftotext: %v", err)
	}
	return strings.Join(strings.Fields(string(out)), " ")
}
