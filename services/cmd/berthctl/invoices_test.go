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
