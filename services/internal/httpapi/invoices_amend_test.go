package httpapi_test

import (
	"context"
	"encoding/csv"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestInvoicesListCreditsAndCorrections: GET /v1/invoices lists an
// invoice's correction and credit note beside it, with kind, amends and
// the amended invoice's number; each reads as JSON (a correction's line
// naming the line it adds to), HTML, PDF and CSV as "Correction 2" /
// "Credit note 3" amending "Invoice 1".
func TestInvoicesListCreditsAndCorrections(t *testing.T) {
	e := newEnv(t)
	ada := e.signup("ada@example.com")
	jan := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e.insertInvoice(t, "inv_jan", ada.accountID, ada.tenantID, jan, 1, 5_725_806)
	ctx := context.Background()
	at := jan.AddDate(0, 1, 2)
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO invoices (id, account_id, month, kind, amends, status, currency, total_cents, created_at, updated_at)
		  VALUES ('inv_corr', $1, $2, 'correction', 'inv_jan', 'draft', 'usd', 600, $3, $3),
		         ('inv_cred', $1, $2, 'credit', 'inv_jan', 'draft', 'usd', -150, $3, $3)`, []any{ada.accountID, jan, at}},
		{`INSERT INTO invoice_lines (invoice_id, line, tenant_id, tenant_slug, plan, meter, description, unit, quantity, included, billable,
		  rate_cents, rate_per, amount_cents, amends_line)
		  VALUES ('inv_corr', 1, $1, 'default', 'pro', 'messages', 'Messages published: late usage (line 2 of invoice 1)', 'message',
		          3000000, 0, 3000000, 20, 1000000, 600, 2),
		         ('inv_cred', 1, '', '', '', 'credit', 'outage on 12 January', 'credit', 1, 0, 1, NULL, NULL, -150, NULL)`, []any{ada.tenantID}},
		{`UPDATE invoices SET status = 'final', number = CASE id WHEN 'inv_corr' THEN 2 ELSE 3 END, finalized_at = $1
		  WHERE id IN ('inv_corr', 'inv_cred')`, []any{at}},
	} {
		if _, err := e.pool.Exec(ctx, q.sql, q.args...); err != nil {
			t.Fatal(err)
		}
	}

	type item struct {
		ID           string  `json:"id"`
		Kind         string  `json:"kind"`
		Amends       *string `json:"amends"`
		AmendsNumber *int64  `json:"amends_number"`
		Number       *int64  `json:"number"`
		Total        int64   `json:"total_cents"`
		Lines        []struct {
			Meter      string `json:"meter"`
			AmendsLine *int   `json:"amends_line"`
			Amount     int64  `json:"amount_cents"`
		} `json:"lines"`
	}
	var page struct {
		Items []item `json:"items"`
	}
	r := e.do(t, "GET", "/v1/invoices", ada.key, nil)
	want(t, r, http.StatusOK)
	r.json(t, &page)
	got := map[string]item{}
	for _, it := range page.Items {
		got[it.ID] = it
	}
	if len(page.Items) != 3 || got["inv_jan"].Kind != "invoice" || got["inv_jan"].Amends != nil || got["inv_jan"].AmendsNumber != nil {
		t.Fatalf("list %s", r.body)
	}
	for id, kind := range map[string]string{"inv_corr": "correction", "inv_cred": "credit"} {
		it := got[id]
		if it.Kind != kind || it.Amends == nil || *it.Amends != "inv_jan" || it.AmendsNumber == nil || *it.AmendsNumber != 1 {
			t.Fatalf("%s in the list: %+v (%s)", id, it, r.body)
		}
	}

	var doc item
	r = e.do(t, "GET", "/v1/invoices/inv_corr", ada.key, nil)
	want(t, r, http.StatusOK)
	r.json(t, &doc)
	if doc.Kind != "correction" || *doc.AmendsNumber != 1 || len(doc.Lines) != 1 || doc.Lines[0].AmendsLine == nil || *doc.Lines[0].AmendsLine != 2 {
		t.Fatalf("correction JSON %s", r.body)
	}
	r = e.do(t, "GET", "/v1/invoices/inv_cred", ada.key, nil)
	want(t, r, http.StatusOK)
	doc = item{}
	r.json(t, &doc)
	if doc.Kind != "credit" || doc.Total != -150 || len(doc.Lines) != 1 || doc.Lines[0].Meter != "credit" || doc.Lines[0].AmendsLine != nil {
		t.Fatalf("credit JSON %s", r.body)
	}

	for id, title := range map[string]string{"inv_corr": "Correction 2", "inv_cred": "Credit note 3"} {
		r = e.do(t, "GET", "/v1/invoices/"+id+".html", ada.key, nil)
		want(t, r, http.StatusOK)
		if body := string(r.body); !strings.Contains(body, "<h1>"+title+"</h1>") || !strings.Contains(body, "Amends Invoice 1 (inv_jan)") {
			t.Fatalf("%s HTML:\n%s", id, body)
		}
		r = e.do(t, "GET", "/v1/invoices/"+id+".pdf", ada.key, nil)
		want(t, r, http.StatusOK)
		if text := pdfText(t, r.body); !strings.Contains(text, title) || !strings.Contains(text, "Amends Invoice 1 (inv_jan)") {
			t.Fatalf("%s PDF:\n%s", id, text)
		}
		r = e.do(t, "GET", "/v1/invoices/"+id+".csv", ada.key, nil)
		want(t, r, http.StatusOK)
		rows, err := csv.NewReader(strings.NewReader(string(r.body))).ReadAll()
		if err != nil || len(rows) != 3 || rows[1][18] != title || rows[1][20] != "inv_jan" || rows[1][21] != "1" {
			t.Fatalf("%s CSV %v (%v)", id, rows, err)
		}
	}
	r = e.do(t, "GET", "/v1/invoices/inv_cred.html", ada.key, nil)
	if !strings.Contains(string(r.body), "outage on 12 January") || !strings.Contains(string(r.body), "-USD 1.50") {
		t.Fatalf("credit HTML lacks its reason and amount:\n%s", r.body)
	}
}
