package invoice

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math/big"
	"strconv"
	"time"

	"berth.dev/billing/plan"
)

// MarshalJSON adds the period (month "2006-01", period_start, period_end)
// to the document's fields.
func (in Invoice) MarshalJSON() ([]byte, error) {
	type doc Invoice
	return json.Marshal(struct {
		doc
		Month       string    `json:"month"`
		PeriodStart time.Time `json:"period_start"`
		PeriodEnd   time.Time `json:"period_end"`
	}{doc(in), in.Month.Format("2006-01"), in.Month, in.PeriodEnd()})
}

// Title is the document's heading: "Invoice 42", "Draft invoice" (a draft
// has no number yet), "Credit note 43", "Correction 44".
func (in *Invoice) Title() string {
	name := map[string]string{"invoice": "Invoice", "credit": "Credit note", "correction": "Correction"}[in.Kind]
	if in.Number == nil {
		return "Draft " + lower(name)
	}
	return fmt.Sprintf("%s %d", name, *in.Number)
}

// Amending names the document a credit or correction amends: "Invoice 42
// (inv_…)"; empty for an invoice.
func (in *Invoice) Amending() string {
	if in.Amends == nil {
		return ""
	}
	if in.AmendsNumber == nil {
		return *in.Amends
	}
	amended := Invoice{Kind: in.AmendsKind, Number: in.AmendsNumber}
	if amended.Kind == "" {
		amended.Kind = KindInvoice
	}
	return amended.Title() + " (" + *in.Amends + ")"
}

func lower(s string) string {
	if s == "" {
		return s
	}
	return string(s[0]|0x20) + s[1:]
}

// csvHeader is the CSV's first row; every later row is one line item. The
// last five columns name the document ("Credit note 43") and, for a credit
// or correction, the document it amends and, per line of a correction, the
// amended line.
var csvHeader = []string{"invoice_id", "number", "status", "month", "currency", "line", "tenant_id", "tenant_slug",
	"plan", "meter", "description", "unit", "quantity", "included", "billable", "rate_cents", "rate_per", "amount_cents",
	"document", "kind", "amends", "amends_number", "amends_line"}

// csvAmount is the amount_cents column, where the total row has the total.
const csvAmount = 17

// WriteCSV writes the document's line items, one per row after a header
// row, with the document's id, number, status, month and currency on each,
// and a last row "total" with the total.
func (in *Invoice) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	num, amends, amendsNum := "", "", ""
	if in.Number != nil {
		num = strconv.FormatInt(*in.Number, 10)
	}
	if in.Amends != nil {
		amends = *in.Amends
	}
	if in.AmendsNumber != nil {
		amendsNum = strconv.FormatInt(*in.AmendsNumber, 10)
	}
	head := []string{in.ID, num, in.Status, in.Month.Format("2006-01"), in.Currency}
	doc := []string{in.Title(), in.Kind, amends, amendsNum}
	_ = cw.Write(csvHeader)
	i64 := func(v int64) string { return strconv.FormatInt(v, 10) }
	for _, l := range in.Lines {
		rc, rp, al := "", "", ""
		if l.Rate != nil {
			rc, rp = i64(l.Rate.Cents), i64(l.Rate.Per)
		}
		if l.AmendsLine != nil {
			al = strconv.Itoa(*l.AmendsLine)
		}
		row := append(head[:5:5], strconv.Itoa(l.Line), l.TenantID, l.TenantSlug, l.Plan, l.Meter, l.Description,
			l.Unit, i64(l.Quantity), i64(l.Included), i64(l.Billable), rc, rp, i64(l.AmountCents))
		_ = cw.Write(append(append(row, doc...), al))
	}
	total := make([]string, len(csvHeader))
	copy(total, head)
	copy(total[csvAmount+1:], doc)
	total[9], total[csvAmount] = "total", i64(in.TotalCents)
	_ = cw.Write(total)
	cw.Flush()
	return cw.Error()
}

// Money formats cents as a decimal amount with its currency: "USD 1,234.05".
func Money(cents int64, currency string) string {
	sign := ""
	if cents < 0 {
		sign, cents = "-", -cents
	}
	return fmt.Sprintf("%s%s %s.%02d", sign, upper(currency), group(cents/100), cents%100)
}

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 0x20
		}
	}
	return string(b)
}

// group writes n with thousands separators.
func group(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// human shows a line's quantity in the unit it is priced in: messages,
// connection-minutes, GB-months, GB, days of the plan.
func human(meter string, q int64) string {
	ratio := func(div int64, unit string) string {
		r := new(big.Rat).SetFrac64(q, div)
		return r.FloatString(3) + " " + unit
	}
	switch plan.Meter(meter) {
	case Credit:
		return ""
	case plan.Messages:
		return group(q) + " messages"
	case plan.ConnectionTime:
		return ratio(plan.ConnectionMinute, "connection-minutes")
	case plan.Storage:
		return ratio(plan.GBMonth, "GB-months")
	case plan.Transfer:
		return ratio(plan.GB, "GB")
	}
	return ratio(24*60*60, "days")
}

// rateText shows a rate in the units of human.
func rateText(meter string, r *plan.Rate, currency string) string {
	if meter == Credit {
		return ""
	}
	if r == nil {
		return "included (hard cap)"
	}
	if meter == Base {
		return Money(r.Cents, currency) + " per month"
	}
	per := map[plan.Meter]string{
		plan.Messages: group(r.Per) + " messages", plan.ConnectionTime: group(r.Per/plan.ConnectionMinute) + " connection-minutes",
		plan.Storage: new(big.Rat).SetFrac64(r.Per, plan.GBMonth).FloatString(0) + " GB-month", plan.Transfer: new(big.Rat).SetFrac64(r.Per, plan.GB).FloatString(0) + " GB",
	}[plan.Meter(meter)]
	return Money(r.Cents, currency) + " per " + per
}

var page = template.Must(template.New("invoice").Funcs(template.FuncMap{
	"money": Money, "human": human, "rate": rateText,
	"date": func(v any) string {
		switch t := v.(type) {
		case time.Time:
			return t.Format("2 January 2006")
		case *time.Time:
			return t.Format("2 January 2006")
		}
		return ""
	},
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}} · Berth</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:2em auto;max-width:60em;color:#111}
table{border-collapse:collapse;width:100%}th,td{padding:.3em .5em;border-bottom:1px solid #ddd;text-align:left}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}tfoot td{font-weight:bold;border-top:2px solid #111}
.draft{color:#a60}@media print{.noprint{display:none}}
</style></head><body>
<h1>{{.Title}}{{if eq .Status "draft"}} <span class="draft">(estimate, not issued)</span>{{end}}</h1>
{{with .Amending}}<p>Amends {{.}}</p>
{{end}}<p>Berth · account <code>{{.AccountID}}</code> · document <code>{{.ID}}</code><br>
Period {{date .Month}} to {{date .PeriodEnd}} (UTC, end exclusive){{if .FinalizedAt}} · issued {{date .FinalizedAt}}{{else}} · updated {{.UpdatedAt.Format "2006-01-02 15:04 UTC"}}{{end}}</p>
<table><thead><tr><th class="n">#</th><th>Tenant</th><th>Item</th><th class="n">Quantity</th><th class="n">Included</th><th>Rate</th><th class="n">Amount</th></tr></thead>
<tbody>{{$c := .Currency}}{{range .Lines}}
<tr><td class="n">{{.Line}}</td><td>{{if .TenantID}}{{.TenantSlug}} <small>({{.Plan}})</small>{{end}}</td><td>{{.Description}}</td>
<td class="n">{{human .Meter .Quantity}}</td><td class="n">{{if .Included}}{{human .Meter .Included}}{{end}}</td>
<td>{{rate .Meter .Rate $c}}</td><td class="n">{{money .AmountCents $c}}</td></tr>{{end}}
</tbody><tfoot><tr><td colspan="6">Total</td><td class="n">{{money .TotalCents .Currency}}</td></tr></tfoot></table>
<p><small>Amounts are rounded half up to the cent per line. A GB is 10^9 bytes; a GB-month is a GB held for 30 days.</small></p>
</body></html>
`))

// WriteHTML writes the document as a printable HTML page.
func (in *Invoice) WriteHTML(w io.Writer) error { return page.Execute(w, in) }
