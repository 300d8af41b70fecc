package e2e

import (
	"bytes"
	"fmt"
	"math/big"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"berth.dev/billing/invoice"
	"berth.dev/billing/plan"
	"berth.dev/e2e/internal/stack"
)

// issuedInvoice is an invoice as GET /v1/invoices/{id} answers it.
type issuedInvoice struct {
	ID          string         `json:"id"`
	Kind        string         `json:"kind"`
	Status      string         `json:"status"`
	Number      *int64         `json:"number"`
	PeriodStart time.Time      `json:"period_start"`
	PeriodEnd   time.Time      `json:"period_end"`
	TotalCents  int64          `json:"total_cents"`
	Lines       []invoice.Line `json:"lines"`
}

// finalInvoices are a's issued invoices of months before end, oldest
// first, with their lines.
func finalInvoices(t *testing.T, s *stack.Stack, a stack.Account, end time.Time) []issuedInvoice {
	t.Helper()
	var list struct {
		Items []issuedInvoice `json:"items"`
	}
	if code := s.Do(t, "GET", "/v1/invoices?limit=100", a.APIKey, nil, &list); code != http.StatusOK {
		t.Fatalf("list invoices: status %d", code)
	}
	var out []issuedInvoice
	for i := len(list.Items) - 1; i >= 0; i-- { // newest month first
		it := list.Items[i]
		if it.Kind != "invoice" || !it.PeriodStart.Before(end) {
			continue
		}
		if it.Status != invoice.Final || it.Number == nil {
			t.Fatalf("invoice %s of %v: status %s, number %v; want issued", it.ID, it.PeriodStart, it.Status, it.Number)
		}
		var doc issuedInvoice
		if code := s.Do(t, "GET", "/v1/invoices/"+it.ID, a.APIKey, nil, &doc); code != http.StatusOK {
			t.Fatalf("invoice %s: status %d", it.ID, code)
		}
		out = append(out, doc)
	}
	return out
}

// roundHalfUp is q × cents / per in cents, rounded half up, computed as
// an exact rational.
func roundHalfUp(q, cents, per int64) int64 {
	r := new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(q), big.NewInt(cents)), big.NewInt(per))
	r.Add(r, big.NewRat(1, 2))
	return new(big.Int).Quo(r.Num(), r.Denom()).Int64() // floor: r ≥ 0
}

// pdfText is a PDF's text as poppler's pdftotext reads it in drawing order,
// white space made single spaces (infra/dev/tools.sh installs it).
func pdfText(t *testing.T, pdf []byte) string {
	t.Helper()
	cmd := exec.Command("pdftotext", "-raw", "-enc", "UTF-8", "-", "-")
	cmd.Stdin = bytes.NewReader(pdf)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pdftotext (Debian poppler-utils, infra/dev/tools.sh): %v", err)
	}
	return strings.Join(strings.Fields(string(out)), " ")
}

// checkProRated rates tenantID's lines of the issued invoices apart from
// the worker, on the pro plan's prices: each line's billable quantity,
// rate and amount (exact rationals rounded half up), each invoice's total,
// and the sum of each meter's quantities against sums (meter → quantity).
// Other tenants' lines (free plan) must show the usage rows' quantities
// (raw: tenant → meter → quantity) and nothing to pay.
func checkProRated(t *testing.T, issued []issuedInvoice, tenantID string, raw map[string]map[string]int64, sums map[string]int64) {
	t.Helper()
	pro, err := plan.PriceOf("pro")
	if err != nil {
		t.Fatal(err)
	}
	sum := map[string]int64{}
	for _, in := range issued {
		secs := int64(in.PeriodEnd.Sub(in.PeriodStart) / time.Second)
		var total int64
		for _, l := range in.Lines {
			total += l.AmountCents
			if l.TenantID != tenantID {
				if l.AmountCents != 0 || (l.Meter != invoice.Base && l.Quantity != raw[l.TenantID][l.Meter]) {
					t.Errorf("invoice %s line %d (tenant %s, %s plan, %s): quantity %d, amount %d; want the usage rows' %d and nothing to pay",
						in.ID, l.Line, l.TenantSlug, l.Plan, l.Meter, l.Quantity, l.AmountCents, raw[l.TenantID][l.Meter])
				}
				continue
			}
			sum[l.Meter] += l.Quantity
			if l.Plan != "pro" {
				t.Errorf("line %d: plan %q, want pro", l.Line, l.Plan)
			}
			want := l
			if l.Meter == invoice.Base {
				want.Rate = &plan.Rate{Cents: pro.MonthlyCents, Per: secs}
				want.Billable = l.Quantity
			} else {
				mp := pro.Meters[plan.Meter(l.Meter)]
				want.Rate = mp.Overage
				if l.Included <= 0 || l.Included > mp.Included { // pro rata for a tenant that did not have the whole month
					t.Errorf("line %d (%s): included %d, want within (0, %d]", l.Line, l.Meter, l.Included, mp.Included)
				}
				want.Billable = max(0, l.Quantity-l.Included)
			}
			want.AmountCents = roundHalfUp(want.Billable, want.Rate.Cents, want.Rate.Per)
			if l.Billable != want.Billable || *l.Rate != *want.Rate || l.AmountCents != want.AmountCents {
				t.Errorf("invoice %s line %d (%s): billable %d at %+v = %d cents; want %d at %+v = %d cents",
					in.ID, l.Line, l.Meter, l.Billable, *l.Rate, l.AmountCents, want.Billable, *want.Rate, want.AmountCents)
			}
		}
		if total != in.TotalCents || in.TotalCents <= 0 {
			t.Errorf("invoice %s: total %d, lines sum to %d", in.ID, in.TotalCents, total)
		}
	}
	for meter, w := range sums {
		if sum[meter] != w {
			t.Errorf("the pro tenant's %s lines sum to %d, want %d", meter, sum[meter], w)
		}
	}
}

// invoicePDFText fetches the printable PDF of in with apiKey, checks it is
// one and shows the invoice's number, total and last line's amount, and
// returns its text.
func invoicePDFText(t *testing.T, s *stack.Stack, apiKey string, in issuedInvoice) string {
	t.Helper()
	pdf := call(t, s, "GET", "/v1/invoices/"+in.ID+".pdf", apiKey, "", nil)
	if pdf.status != http.StatusOK || pdf.contentType != "application/pdf" || !bytes.HasPrefix(pdf.body, []byte("%PDF-1.")) {
		t.Fatalf("invoice PDF: %d %s %q", pdf.status, pdf.contentType, pdf.body[:min(len(pdf.body), 16)])
	}
	text := pdfText(t, pdf.body)
	for _, want := range []string{fmt.Sprintf("Invoice %d", *in.Number), "Total " + invoice.Money(in.TotalCents, "usd"),
		invoice.Money(in.Lines[len(in.Lines)-1].AmountCents, "usd")} {
		if !strings.Contains(text, want) {
			t.Errorf("the invoice PDF lacks %q:\n%s", want, text)
		}
	}
	return text
}
