package invoice

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"berth.dev/billing/plan"
)

// amendments returns a credit note 9 and a correction 8 of sample's
// Invoice 7.
func amendments(t *testing.T) (credit, correction *Invoice) {
	t.Helper()
	in := sample(t)
	fin := in.FinalizedAt.Add(48 * time.Hour)
	seven, eight, nine, two := int64(7), int64(8), int64(9), 2
	credit = &Invoice{ID: "inv_cr", AccountID: in.AccountID, Kind: KindCredit, Amends: &in.ID, AmendsNumber: &seven, AmendsKind: KindInvoice,
		Status: Final, Number: &nine, Month: in.Month, Currency: "usd", TotalCents: -1500, CreatedAt: fin, UpdatedAt: fin, FinalizedAt: &fin,
		Lines: []Line{{Line: 1, Meter: Credit, Description: "outage on 12 January", Unit: "credit", Quantity: 1, Billable: 1, AmountCents: -1500}}}
	r := plan.Rate{Cents: 20, Per: 1_000_000}
	correction = &Invoice{ID: "inv_co", AccountID: in.AccountID, Kind: KindCorrection, Amends: &in.ID, AmendsNumber: &seven, AmendsKind: KindInvoice,
		Status: Final, Number: &eight, Month: in.Month, Currency: "usd", TotalCents: 600, CreatedAt: fin, UpdatedAt: fin, FinalizedAt: &fin,
		Lines: []Line{{Line: 1, TenantID: "ten_a", TenantSlug: "fleet", Plan: "pro", Meter: string(plan.Messages),
			Description: "Messages published: late usage (line 2 of invoice 7)", Unit: "message", Quantity: 30_000_001, Billable: 30_000_001,
			Rate: &r, AmountCents: 600, AmendsLine: &two}}}
	return credit, correction
}

// TestAmendmentsRender: a credit note and a correction render as "Credit
// note 9" / "Correction 8" naming the invoice they amend (its number and
// id) in HTML, PDF, CSV and JSON; a credit's line has no tenant, its
// reason and a negative amount.
func TestAmendmentsRender(t *testing.T) {
	credit, correction := amendments(t)
	for _, tc := range []struct {
		doc   *Invoice
		title string
		html  []string
		pdf   []string
	}{
		{credit, "Credit note 9", []string{"<h1>Credit note 9</h1>", "<p>Amends Invoice 7 (inv_x)</p>", "outage on 12 January", "-USD 15.00",
			`<td class="n">1</td><td></td>`},
			[]string{"Credit note 9", "Amends Invoice 7 (inv_x)", "1 outage on 12 January -USD 15.00", "Total -USD 15.00"}},
		{correction, "Correction 8", []string{"<h1>Correction 8</h1>", "<p>Amends Invoice 7 (inv_x)</p>", "30,000,001 messages", "USD 6.00"},
			[]string{"Correction 8", "Amends Invoice 7 (inv_x)", "1 fleet (pro) Messages published: late usage (line 2 of invoice 7) 30,000,001 messages",
				"Total USD 6.00"}},
	} {
		t.Run(tc.title, func(t *testing.T) {
			if got := tc.doc.Title(); got != tc.title {
				t.Fatalf("title %q", got)
			}
			var b bytes.Buffer
			if err := tc.doc.WriteHTML(&b); err != nil {
				t.Fatal(err)
			}
			for _, want := range tc.html {
				if !strings.Contains(b.String(), want) {
					t.Errorf("HTML lacks %q:\n%s", want, b.String())
				}
			}
			b.Reset()
			if err := tc.doc.WritePDF(&b); err != nil {
				t.Fatal(err)
			}
			text := strings.Join(pdfText(t, b.Bytes(), "-raw"), " ")
			for _, want := range tc.pdf {
				if !strings.Contains(text, want) {
					t.Errorf("PDF lacks %q:\n%s", want, text)
				}
			}

			b.Reset()
			if err := tc.doc.WriteCSV(&b); err != nil {
				t.Fatal(err)
			}
			rows, err := csv.NewReader(&b).ReadAll()
			if err != nil {
				t.Fatal(err)
			}
			col := map[string]int{}
			for i, h := range rows[0] {
				col[h] = i
			}
			line, total := rows[1], rows[len(rows)-1]
			if len(rows) != 3 || line[col["document"]] != tc.title || line[col["kind"]] != tc.doc.Kind || line[col["amends"]] != "inv_x" ||
				line[col["amends_number"]] != "7" || total[col["meter"]] != "total" ||
				total[col["amount_cents"]] != line[col["amount_cents"]] || total[col["document"]] != tc.title {
				t.Fatalf("CSV %v", rows)
			}
			wantLine := ""
			if tc.doc.Kind == KindCorrection {
				wantLine = "2"
			}
			if line[col["amends_line"]] != wantLine {
				t.Errorf("amends_line %q, want %q", line[col["amends_line"]], wantLine)
			}

			j, err := json.Marshal(tc.doc)
			if err != nil {
				t.Fatal(err)
			}
			var doc map[string]any
			_ = json.Unmarshal(j, &doc)
			if doc["kind"] != tc.doc.Kind || doc["amends"] != "inv_x" || doc["amends_number"] != 7.0 || doc["month"] != "2026-01" {
				t.Fatalf("JSON %s", j)
			}
		})
	}
}
