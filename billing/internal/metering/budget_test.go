package metering

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/billing/plan"
	"berth.dev/quotas"
	"berth.dev/testenv"
)

// setQuotas gives tenant tid the quotas q.
func setQuotas(t *testing.T, pool *pgxpool.Pool, tid string, q quotas.Quotas) {
	t.Helper()
	cols, ph, args := []string{"tenant_id"}, []string{"$1"}, []any{tid}
	for _, f := range quotas.Fields {
		cols = append(cols, f.Name)
		args = append(args, *f.Get(&q))
		ph = append(ph, fmt.Sprintf("$%d", len(args)))
	}
	if _, err := pool.Exec(context.Background(), `INSERT INTO quotas (`+strings.Join(cols, ", ")+`) VALUES (`+strings.Join(ph, ", ")+`)`, args...); err != nil {
		t.Fatal(err)
	}
}

func readQuotas(t *testing.T, pool *pgxpool.Pool, tid string) (q quotas.Quotas) {
	t.Helper()
	names, dest := []string{}, []any{}
	for _, f := range quotas.Fields {
		names = append(names, f.Name)
		dest = append(dest, f.Get(&q))
	}
	if err := pool.QueryRow(context.Background(), `SELECT `+strings.Join(names, ", ")+` FROM quotas WHERE tenant_id = $1`, tid).Scan(dest...); err != nil {
		t.Fatal(err)
	}
	return q
}

// TestBudgets: the worker compares each budgeted account's draft with its
// budget at every run: 80 % is recorded once; 100 % with action cap is
// recorded and caps the account's tenants' quotas to the free plan's bounds
// live (NOTIFY berth_quotas); with action notify it is only recorded; an
// account under budget, or another account, is untouched.
func TestBudgets(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	w := New(pool, Config{Grace: time.Hour, Now: func() time.Time { return now }}, quietLog())
	pro, _ := plan.Lookup("pro")
	free, _ := plan.Lookup("free")
	mar := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	for _, a := range []string{"acc_cap", "acc_notify", "acc_none"} {
		tid := "ten_" + strings.TrimPrefix(a, "acc_")
		seedTenant(t, pool, a, tid, "pro", mar)
		setQuotas(t, pool, tid, pro.Defaults)
	}
	// $60.00 budgets; a pro tenant's draft starts at its $49.00 fee (81.6 %).
	if _, err := pool.Exec(ctx, `INSERT INTO budgets (account_id, monthly_cents, action) VALUES
		('acc_cap', 6000, 'cap'), ('acc_notify', 6000, 'notify')`); err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN berth_quotas"); err != nil {
		t.Fatal(err)
	}
	notices := func(account string) (pcts []int) {
		rows, err := pool.Query(ctx, `SELECT percent FROM budget_notifications WHERE account_id = $1 ORDER BY percent`, account)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var p int
			if err := rows.Scan(&p); err != nil {
				t.Fatal(err)
			}
			pcts = append(pcts, p)
		}
		return pcts
	}
	run := func() Report {
		t.Helper()
		r, err := w.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := run(); r.BudgetNotices != 2 || fmt.Sprint(notices("acc_cap"), notices("acc_notify")) != "[80] [80]" {
		t.Fatalf("first run: %+v, notices %v %v; want 80 %% for both", r, notices("acc_cap"), notices("acc_notify"))
	}
	if r := run(); r.BudgetNotices != 0 {
		t.Fatalf("second run: %+v; want nothing recorded twice", r)
	}
	// 160 M messages: 60 M over pro's 100 M at $0.20 per million = $12.00, so $61.00: over 100 %.
	for _, tid := range []string{"ten_cap", "ten_notify"} {
		if err := flush(ctx, pool, usageRow{tid, "n1", mar.Add(48 * time.Hour), 160_000_000, 0, 0, 0, 0}); err != nil {
			t.Fatal(err)
		}
	}
	if r := run(); r.BudgetNotices != 2 {
		t.Fatalf("run over budget: %+v; want two 100 %% notices", r)
	}
	if got := fmt.Sprint(notices("acc_cap"), notices("acc_notify"), notices("acc_none")); got != "[80 100] [80 100] []" {
		t.Fatalf("notices %s", got)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if n, err := conn.Conn().WaitForNotification(wctx); err != nil || n.Payload != "ten_cap" {
		t.Fatalf("berth_quotas: %+v, %v; want ten_cap", n, err)
	}
	capped := readQuotas(t, pool, "ten_cap")
	if err := free.Check(capped); err != nil {
		t.Fatalf("capped tenant outside the free plan's bounds: %v", err)
	}
	for _, tid := range []string{"ten_notify", "ten_none"} {
		if readQuotas(t, pool, tid) != pro.Defaults {
			t.Fatalf("%s's quotas changed", tid)
		}
	}
	var capFlag bool
	if err := pool.QueryRow(ctx, `SELECT capped FROM budget_notifications WHERE account_id = 'acc_cap' AND percent = 100`).Scan(&capFlag); err != nil || !capFlag {
		t.Fatalf("acc_cap's 100 %% notice: capped %v, %v", capFlag, err)
	}
}
