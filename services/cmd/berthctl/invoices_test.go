package main

import (
	"encoding/json"
	"strings"
	"testing"

	"berth.dev/services/apiclient"
)

// invoices lists the account's invoices and shows one's lines; another
// account's or an unknown id is "not found" (exit 4).
func TestInvoices(t *testing.T) {
	url, pool := apiDB(t)
	c := newCLI(t, url)
	c.ok("signup", "--email", "payer@example.com", "--password", "correct horse battery", "--tenant-slug", "plant")
	if out := c.ok("invoices"); !strings.Contains(out, "MONTH") || strings.Contains(out, "inv_") {
		t.Fatalf("invoices before any: %q", out)
	}
	ctx := t.Context()
	var acc struct{ ID string }
	if err := apiclient.New(url, c.config().APIKey).Call(ctx, apiclient.GetAccount, nil, nil, nil, &acc); err != nil {
		t.Fatal(err)
	}
	// What the billing worker writes for an issued month (billing/internal/metering).
	if _, err := pool.Exec(ctx, `INSERT INTO invoices (id, account_id, month, status, number, currency, total_cents, created_at, updated_at, finalized_at)
		VALUES ('inv_cli', $1, '2026-11-01T00:00:00Z', 'draft', NULL, 'USD', 4912, now(), now(), NULL)`, acc.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO invoice_lines (invoice_id, line, tenant_id, tenant_slug, plan, meter, description, unit, quantity, included, billable, amount_cents)
		VALUES ('inv_cli', 1, 'ten_x', 'plant', 'pro', 'base', 'pro plan', 'month', 1, 0, 1, 4900),
		       ('inv_cli', 2, 'ten_x', 'plant', 'pro', 'messages', 'messages over the included', 'messages', 1200, 1000, 200, 12)`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE invoices SET status = 'final', number = 7, finalized_at = now() WHERE id = 'inv_cli'`); err != nil {
		t.Fatal(err)
	}

	var l apiclient.List[invoice]
	if err := json.Unmarshal([]byte(c.ok("invoices", "--json")), &l); err != nil || len(l.Items) != 1 || l.Items[0].TotalCents != 4912 {
		t.Fatalf("invoices --json: %+v %v", l, err)
	}
	if out := c.ok("invoices"); !strings.Contains(out, "inv_cli") || !strings.Contains(out, "#7") || !strings.Contains(out, "49.12 USD") {
		t.Fatalf("invoices table:\n%s", out)
	}
	out := c.ok("invoices", "show", "inv_cli")
	for _, want := range []string{"#7", "pro plan", "1200 messages", "0.12 USD", "Total 49.12 USD"} {
		if !strings.Contains(out, want) {
			t.Fatalf("invoices show lacks %q:\n%s", want, out)
		}
	}
	if code, _, _ := c.run("invoices", "show", "inv_nosuch"); code != exitNotFound {
		t.Fatalf("an unknown invoice: exit %d, want 4", code)
	}
	other := newCLI(t, url)
	other.ok("signup", "--email", "other@example.com", "--password", "correct horse battery", "--tenant-slug", "other")
	if code, _, _ := other.run("invoices", "show", "inv_cli"); code != exitNotFound {
		t.Fatalf("another account's invoice: exit %d, want 4", code)
	}
	if code, _, _ := c.run("invoices", "show"); code != exitUsage {
		t.Fatalf("show without an id: exit %d, want 2", code)
	}
}

// invoices lists credit notes and corrections with their kind and the
// number of the document they amend; show names the document by kind and
// what it amends (a credit note may amend a correction); --json is the
// API's answer.
func TestInvoicesCreditsAndCorrections(t *testing.T) {
	url, pool := apiDB(t)
	c := newCLI(t, url)
	c.ok("signup", "--email", "amended@example.com", "--password", "correct horse battery", "--tenant-slug", "mill")
	ctx := t.Context()
	var acc struct{ ID string }
	if err := apiclient.New(url, c.config().APIKey).Call(ctx, apiclient.GetAccount, nil, nil, nil, &acc); err != nil {
		t.Fatal(err)
	}
	// What the billing worker (the invoice, its correction) and `billing credit`
	// (a credit note on the correction) write: documents issued at once.
	for _, q := range []string{
		`INSERT INTO invoices (id, account_id, month, kind, amends, status, currency, total_cents, created_at, updated_at)
		 VALUES ('inv_c7', $1, '2026-01-01T00:00:00Z', 'invoice', NULL, 'draft', 'usd', 5900, now(), now()),
		        ('inv_c8', $1, '2026-01-01T00:00:00Z', 'correction', 'inv_c7', 'draft', 'usd', 625, now(), now()),
		        ('inv_c9', $1, '2026-01-01T00:00:00Z', 'credit', 'inv_c8', 'draft', 'usd', -500, now(), now())`,
		`INSERT INTO invoice_lines (invoice_id, line, tenant_id, tenant_slug, plan, meter, description, unit, quantity, included, billable, amount_cents, amends_line)
		 VALUES ('inv_c7', 1, 'ten_x', 'mill', 'pro', 'base', 'pro plan', 'month', 1, 0, 1, 5900, NULL),
		        ('inv_c8', 1, 'ten_x', 'mill', 'pro', 'messages', 'Messages published: late usage (line 2 of invoice 7)', 'message', 3000000, 0, 3000000, 625, 2),
		        ('inv_c9', 1, '', '', '', 'credit', 'outage on 12 January', 'credit', 1, 0, 1, -500, NULL)`,
		`UPDATE invoices SET status = 'final', finalized_at = now(), number = CASE id WHEN 'inv_c7' THEN 7 WHEN 'inv_c8' THEN 8 ELSE 9 END
		 WHERE account_id = $1`,
	} {
		var args []any
		if strings.Contains(q, "$1") {
			args = append(args, acc.ID)
		}
		if _, err := pool.Exec(ctx, q, args...); err != nil {
			t.Fatal(err)
		}
	}

	out := c.ok("invoices")
	rows := map[string][]string{}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if got := strings.Fields(lines[0]); strings.Join(got, " ") != "ID MONTH KIND NUMBER AMENDS STATUS TOTAL UPDATED" {
		t.Fatalf("invoices header %q", lines[0])
	}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		rows[f[0]] = f
	}
	for id, want := range map[string]string{
		"inv_c7": "inv_c7 2026-01 invoice #7 - final 59.00 usd",
		"inv_c8": "inv_c8 2026-01 correction #8 #7 final 6.25 usd",
		"inv_c9": "inv_c9 2026-01 credit #9 #8 final -5.00 usd",
	} {
		// The UPDATED column (date and time) follows.
		if f := rows[id]; len(f) < 8 || strings.Join(f[:8], " ") != want {
			t.Errorf("invoices row %s: %q, want %q…\n%s", id, f, want, out)
		}
	}

	for id, want := range map[string][]string{
		"inv_c7": {"Invoice #7, 2026-01: final\n", "Total 59.00 usd"},
		"inv_c8": {"Correction #8, 2026-01: final\nAmends Invoice #7 (inv_c7)\n", "late usage", "6.25 usd"},
		"inv_c9": {"Credit note #9, 2026-01: final\nAmends Correction #8 (inv_c8)\n", "outage on 12 January", "Total -5.00 usd"},
	} {
		out := c.ok("invoices", "show", id)
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("invoices show %s lacks %q:\n%s", id, w, out)
			}
		}
		if id == "inv_c7" && strings.Contains(out, "Amends") {
			t.Errorf("an invoice amends nothing:\n%s", out)
		}
	}

	var doc map[string]any
	if err := json.Unmarshal([]byte(c.ok("invoices", "show", "inv_c9", "--json")), &doc); err != nil {
		t.Fatal(err)
	}
	if doc["kind"] != "credit" || doc["amends"] != "inv_c8" || doc["amends_number"] != float64(8) || doc["total_cents"] != float64(-500) {
		t.Fatalf("invoices show --json: %v", doc)
	}
}
