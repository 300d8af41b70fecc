package payment

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/billing/plan"
	"berth.dev/quotas"
)

func readQuotas(t *testing.T, pool *pgxpool.Pool, tid string) (q quotas.Quotas) {
	t.Helper()
	names := make([]string, len(quotas.Fields))
	dest := make([]any, len(quotas.Fields))
	for i, f := range quotas.Fields {
		names[i], dest[i] = f.Name, f.Get(&q)
	}
	if err := pool.QueryRow(context.Background(), `SELECT `+strings.Join(names, ", ")+` FROM quotas WHERE tenant_id = $1`, tid).Scan(dest...); err != nil {
		t.Fatal(err)
	}
	return q
}

func setQuotas(t *testing.T, pool *pgxpool.Pool, tid string, q quotas.Quotas) {
	t.Helper()
	set, args := []string{}, []any{tid}
	for _, f := range quotas.Fields {
		args = append(args, *f.Get(&q))
		set = append(set, fmt.Sprintf("%s = $%d", f.Name, len(args)))
	}
	if _, err := pool.Exec(context.Background(), `UPDATE quotas SET `+strings.Join(set, ", ")+` WHERE tenant_id = $1`, args...); err != nil {
		t.Fatal(err)
	}
}

// TestInvoicePaidRestoresQuotas: an account whose payment failed, whose
// grace ended and whose tenants were capped to the free plan's bounds gets
// its quotas back when Stripe's invoice.paid arrives, signed: each tenant's
// quotas as they were before the cap (custom values included), live (NOTIFY
// berth_quotas per tenant), once however often the event is delivered. A
// forged event restores nothing; a payment within the grace changes no
// quota; a budget cap in force this month keeps the free plan's bounds.
func TestInvoicePaidRestoresQuotas(t *testing.T) {
	p, pool, _ := newProvider(t)
	ctx := context.Background()
	free, _ := plan.Lookup("free")
	pro, _ := plan.Lookup("pro")
	biz, _ := plan.Lookup("business")
	custom := pro.Defaults
	custom.MaxConnections, custom.MaxSubscriptions, custom.RetentionSeconds = 5000, 3000, 20*86400
	customers := map[string]string{}
	for _, a := range []string{"acc_a", "acc_b", "acc_c"} {
		seedAccount(t, pool, a)
		c, err := p.Customer(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		customers[a] = c
	}
	seedTenant(t, pool, "acc_a", "ten_a1", "pro")
	setQuotas(t, pool, "ten_a1", custom)
	seedTenant(t, pool, "acc_a", "ten_a2", "business")
	seedTenant(t, pool, "acc_b", "ten_b1", "pro")
	seedTenant(t, pool, "acc_c", "ten_c1", "pro")
	deliver := func(secret, id, typ, account string) error {
		t.Helper()
		body, hdr := signed(t, secret, id, typ, customers[account])
		_, err := p.HandleWebhook(ctx, body, hdr)
		return err
	}
	state := func(account string) string {
		var s string
		if err := pool.QueryRow(ctx, `SELECT payment_state FROM accounts WHERE id = $1`, account).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	capAfterGrace := func(accounts ...string) {
		t.Helper()
		for _, a := range accounts {
			if err := deliver(testSecret, "evt_fail_"+a, "invoice.payment_failed", a); err != nil {
				t.Fatal(err)
			}
		}
		if n, err := p.EnforceGrace(ctx, time.Now().Add(2*time.Hour), free.Max); err != nil || n != len(accounts) {
			t.Fatalf("EnforceGrace: %d, %v; want %d capped", n, err, len(accounts))
		}
		for _, a := range accounts {
			if s := state(a); s != "capped" {
				t.Fatalf("%s: %s, want capped", a, s)
			}
		}
	}

	// Paying within the grace: back to ok, no quota touched.
	if err := deliver(testSecret, "evt_fail_b", "invoice.payment_failed", "acc_b"); err != nil {
		t.Fatal(err)
	}
	if err := deliver(testSecret, "evt_paid_b", "invoice.paid", "acc_b"); err != nil || state("acc_b") != "ok" {
		t.Fatalf("paid within the grace: %v, state %s", err, state("acc_b"))
	}
	if readQuotas(t, pool, "ten_b1") != pro.Defaults {
		t.Fatal("a payment within the grace changed quotas")
	}

	capAfterGrace("acc_a", "acc_c")
	for _, tid := range []string{"ten_a1", "ten_a2", "ten_c1"} {
		if err := free.Check(readQuotas(t, pool, tid)); err != nil {
			t.Fatalf("%s not capped: %v", tid, err)
		}
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN berth_quotas"); err != nil {
		t.Fatal(err)
	}

	// A forged invoice.paid changes nothing.
	if err := deliver("whsec_someone_else", "evt_forged", "invoice.paid", "acc_a"); !errors.Is(err, ErrSignature) {
		t.Fatalf("forged invoice.paid: %v, want ErrSignature", err)
	}
	if state("acc_a") != "capped" || free.Check(readQuotas(t, pool, "ten_a1")) != nil {
		t.Fatal("a forged invoice.paid restored the account")
	}

	// The signed one restores, twice delivered, applied once.
	for range 2 {
		if err := deliver(testSecret, "evt_paid_a", "invoice.paid", "acc_a"); err != nil {
			t.Fatal(err)
		}
	}
	if s := state("acc_a"); s != "ok" {
		t.Fatalf("acc_a %s after invoice.paid, want ok", s)
	}
	if got := readQuotas(t, pool, "ten_a1"); got != custom {
		t.Fatalf("ten_a1 restored to %+v, want its quotas before the cap %+v", got, custom)
	}
	if got := readQuotas(t, pool, "ten_a2"); got != biz.Defaults {
		t.Fatalf("ten_a2 restored to %+v, want business defaults", got)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	seen := map[string]bool{}
	for len(seen) < 2 {
		n, err := conn.Conn().WaitForNotification(wctx)
		if err != nil {
			t.Fatalf("berth_quotas notifications %v: %v", seen, err)
		}
		seen[n.Payload] = true
	}
	if !seen["ten_a1"] || !seen["ten_a2"] {
		t.Fatalf("notified %v, want ten_a1 and ten_a2", seen)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM quota_snapshots WHERE account_id = 'acc_a'`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("snapshots left: %d, %v", left, err)
	}

	// acc_c's budget capped it this month too: paying keeps the free bounds.
	if _, err := pool.Exec(ctx, `INSERT INTO budgets (account_id, monthly_cents, action) VALUES ('acc_c', 100, 'cap')`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO budget_notifications (account_id, month, percent, total_cents, budget_cents, capped, created_at)
		VALUES ('acc_c', date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', 100, 100, 100, true, now())`); err != nil {
		t.Fatal(err)
	}
	if err := deliver(testSecret, "evt_paid_c", "invoice.paid", "acc_c"); err != nil || state("acc_c") != "ok" {
		t.Fatalf("acc_c paid: %v, %s", err, state("acc_c"))
	}
	want := pro.Defaults
	for _, f := range quotas.Fields {
		*f.Get(&want) = min(*f.Get(&pro.Defaults), *f.Get(&free.Max))
	}
	if got := readQuotas(t, pool, "ten_c1"); got != want {
		t.Fatalf("ten_c1 %+v under a budget cap, want the free bounds %+v", got, want)
	}
}
