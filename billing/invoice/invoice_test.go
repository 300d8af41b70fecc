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

func sample(t *testing.T) *Invoice {
	t.Helper()
	month := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	lines, total, cur, err := Rate(month, []TenantUsage{
		{TenantID: "ten_b", Slug: "<b>factory</b>", Plan: "free", ActiveSeconds: 31 * 86400, Usage: map[plan.Meter]int64{plan.Messages: 5}},
		{TenantID: "ten_a", Slug: "fleet", Plan: "pro", ActiveSeconds: 31 * 86400, Usage: map[plan.Meter]int64{
			plan.Messages: 100_000_000 + 2_500_000, plan.Transfer: 120_500_000_000}},
	})
	if err != nil {
		t.Fatal(err)
	}
	n := int64(7)
	fin := month.AddDate(0, 1, 0).Add(time.Hour)
	return &Invoice{ID: "inv_x", AccountID: "acc_x", Kind: "invoice", Status: Final, Number: &n, Month: month,
		Currency: cur, TotalCents: total, CreatedAt: month, UpdatedAt: fin, FinalizedAt: &fin, Lines: lines}
}

func TestRateLines(t *testing.T) {
	in := sample(t)
	if len(in.Lines) != 10 || in.Lines[0].TenantID != "ten_a" || in.Lines[5].TenantID != "ten_b" {
		t.Fatalf("lines not per tenant in id order, 5 each: %+v", in.Lines)
	}
	for i, l := range in.Lines {
		if l.Line != i+1 {
			t.Fatalf("line %d numbered %d", i+1, l.Line)
		}
	}
	// pro: 4900 base + 2.5M messages at 20c/M (50) + 20.5 GB at 5c (102.5 → 103); free: 0.
	if in.TotalCents != 4900+50+103 {
		t.Fatalf("total %d, want %d", in.TotalCents, 4900+50+103)
	}
}

func TestCSV(t *testing.T) {
	var b bytes.Buffer
	if err := sample(t).WriteCSV(&b); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&b).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 12 || strings.Join(rows[0][:3], ",") != "invoice_id,number,status" {
		t.Fatalf("%d rows, header %v", len(rows), rows[0])
	}
	col := func(name string) int {
		for i, h := range rows[0] {
			if h == name {
				return i
			}
		}
		t.Fatalf("no column %s", name)
		return 0
	}
	if r := rows[5]; r[col("line")] != "5" || r[col("meter")] != "transfer" || r[col("quantity")] != "120500000000" ||
		r[col("billable")] != "20500000000" || r[col("rate_cents")] != "5" || r[col("rate_per")] != "1000000000" || r[col("amount_cents")] != "103" ||
		r[col("number")] != "7" || r[col("month")] != "2026-01" {
		t.Fatalf("transfer row %v", r)
	}
	if last := rows[11]; last[col("meter")] != "total" || last[col("amount_cents")] != "5053" {
		t.Fatalf("total row %v", last)
	}
}

func TestHTML(t *testing.T) {
	var b bytes.Buffer
	if err := sample(t).WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, want := range []string{"<title>Invoice 7 · Berth</title>", "1 January 2026", "1 February 2026", "USD 50.53",
		"USD 1.03", "20.500 GB", "USD 0.05 per 1 GB", "102,500,000 messages", "included (hard cap)", "&lt;b&gt;factory&lt;/b&gt;"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(page, "<b>factory") {
		t.Error("a tenant slug is not escaped")
	}
	draft := sample(t)
	draft.Status, draft.Number, draft.FinalizedAt = Draft, nil, nil
	b.Reset()
	if err := draft.WriteHTML(&b); err != nil || !strings.Contains(b.String(), "Draft invoice") || !strings.Contains(b.String(), "estimate") {
		t.Fatalf("draft page: %v\n%s", err, b.String())
	}
}

func TestJSONCarriesThePeriod(t *testing.T) {
	b, err := json.Marshal(sample(t))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	_ = json.Unmarshal(b, &doc)
	if doc["month"] != "2026-01" || doc["period_end"] != "2026-02-01T00:00:00Z" || doc["number"] != 7.0 || len(doc["lines"].([]any)) != 10 {
		t.Fatalf("JSON %s", b)
	}
}
