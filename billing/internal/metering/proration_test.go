package metering

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"berth.dev/testenv"
)

// TestPlanChangesProratedToTheSecond: a pro tenant upgraded to business on
// 10 January at 12:34:56 and downgraded back to pro on 24 January at
// 03:21:09, and a business tenant created and deleted within the month at
// fractional seconds. Each plan period is rated on its plan: its fee and
// its included amounts pro rata to the second, its usage (each minute
// bucket in the period in effect at the bucket's start) at its plan's
// rates. The draft while the upgrade is in force counts business to the
// month's end; the issued invoice has a group of lines per period. Every
// line equals the test's own big.Rat computation.
func TestPlanChangesProratedToTheSecond(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	var clock atomic.Pointer[time.Time]
	set := func(s string) { v := at(s); clock.Store(&v) }
	w := New(pool, Config{Grace: time.Hour, Now: func() time.Time { return *clock.Load() }}, quietLog())

	jan := at("2026-01-01T00:00:00Z")
	const janSecs = 31 * 86400
	up, down := at("2026-01-10T12:34:56Z"), at("2026-01-24T03:21:09Z")
	secs := func(a, b time.Time) int64 { return int64(b.Sub(a) / time.Second) }

	// ten_p: on pro since December; the trigger opened its period at creation.
	seedTenant(t, pool, "acc_p", "ten_p", "pro", at("2025-12-15T00:00:00Z"))
	// A plan change as the API's records it (the tenants trigger, at the
	// change's second; services' TestPlanChangeRecordsPlanPeriods), here at
	// the test's times: the open period closes and the next opens. Billing
	// reads only the periods.
	changePlan := func(tenant, to string, when time.Time) {
		t.Helper()
		_, err := pool.Exec(ctx, `UPDATE tenant_plan_periods SET ends_at = $2 WHERE tenant_id = $1 AND ends_at IS NULL`, tenant, when)
		must(err)
		_, err = pool.Exec(ctx, `INSERT INTO tenant_plan_periods (tenant_id, account_id, plan, starts_at) VALUES ($1, 'acc_p', $2, $3)`, tenant, to, when)
		must(err)
	}
	changePlan("ten_p", "business", up)
	// ten_q: business, created and deleted within January at fractional
	// seconds (the periods truncate them to the second), the way the API's
	// DELETE leaves it: a tombstone, whose trigger closes the period.
	seedTenant(t, pool, "acc_p", "ten_q", "business", at("2026-01-05T06:07:08.5Z"))

	must(flush(ctx, pool,
		// ten_p, pro: 3 January, and the minute of the upgrade (its bucket starts before 12:34:56).
		usageRow{"ten_p", "n1", at("2026-01-03T00:00:00Z"), 70_000_000, 40e9, 1e9, 10, 3e12},
		usageRow{"ten_p", "n1", at("2026-01-10T12:34:00Z"), 5_000_000, 1e9, 0, 5, 0},
		// ten_p, business.
		usageRow{"ten_p", "n1", at("2026-01-10T12:35:00Z"), 900_000_000, 1500e9, 200e9, 600_000_000, 900e12},
		usageRow{"ten_p", "n2", at("2026-01-15T00:00:00Z"), 300_000_000, 100e9, 0, 0, 0},
		// ten_q: a bucket that starts before its creation, and one of its life.
		usageRow{"ten_q", "n1", at("2026-01-05T06:07:00Z"), 1_000, 1e6, 0, 8, 0},
		usageRow{"ten_q", "n1", at("2026-01-12T00:00:00Z"), 2_000_000_000, 1e9, 1e9, 60, 1e9},
	))

	// 15 January: the draft rates business from the upgrade to the month's end.
	set("2026-01-15T06:00:00Z")
	if _, err := w.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	qStart := at("2026-01-05T06:07:08Z")
	proP1 := expect("ten_p", "pro", secs(jan, up), janSecs, [4]int64{75_000_000, 15, 3e12 * 60, 42e9})
	wantDraft := append(append([]line{}, proP1...),
		expect("ten_p", "business", secs(up, jan.AddDate(0, 1, 0)), janSecs, [4]int64{1_200_000_000, 600_000_000, 900e12 * 60, 1800e9})...)
	wantDraft = append(wantDraft, expect("ten_q", "business", secs(qStart, jan.AddDate(0, 1, 0)), janSecs, [4]int64{2_000_001_000, 68, 1e9 * 60, 2_001_000_000})...)
	_, status, _, total, got := loadInvoice(t, pool, "acc_p", jan)
	if status != "draft" || total != sum(wantDraft) || !cmp.Equal(got, wantDraft) {
		t.Fatalf("draft with the upgrade in force: %s total %d (want %d), diff (-got +want):\n%s", status, total, sum(wantDraft), cmp.Diff(got, wantDraft))
	}

	// ten_q deleted on 20 January (0.75 s past midnight), a late flush of
	// it after; the downgrade on 24 January, usage on both sides of it.
	qEnd := at("2026-01-20T00:00:00.75Z")
	_, err := pool.Exec(ctx, `WITH gone AS (DELETE FROM tenants WHERE id = 'ten_q' RETURNING id, account_id, slug, plan, created_at)
		INSERT INTO deleted_tenants (id, account_id, slug, plan, created_at, deleted_at) SELECT id, account_id, slug, plan, created_at, $1 FROM gone`, qEnd)
	must(err)
	changePlan("ten_p", "pro", down)
	must(flush(ctx, pool,
		usageRow{"ten_q", "n1", at("2026-01-20T00:05:00Z"), 7, 0, 0, 0, 0},
		usageRow{"ten_p", "n1", at("2026-01-24T03:21:00Z"), 11, 0, 0, 0, 0},            // business: starts before 03:21:09
		usageRow{"ten_p", "n1", at("2026-01-24T03:22:00Z"), 110_000_000, 2e9, 0, 0, 0}, // pro again
		usageRow{"ten_p", "n1", at("2026-01-31T23:59:00Z"), 1, 0, 1e9, 0, 2e12},
	))

	set("2026-02-01T01:00:00Z")
	if r, err := w.RunOnce(ctx); err != nil || r.Finalized != 1 {
		t.Fatalf("run after the month: %+v, %v; want January issued", r, err)
	}
	want := append(append([]line{}, proP1...),
		expect("ten_p", "business", secs(up, down), janSecs, [4]int64{1_200_000_011, 600_000_000, 900e12 * 60, 1800e9})...)
	want = append(want, expect("ten_p", "pro", secs(down, jan.AddDate(0, 1, 0)), janSecs, [4]int64{110_000_001, 0, 2e12 * 60, 3e9})...)
	want = append(want, expect("ten_q", "business", secs(qStart, at("2026-01-20T00:00:00Z")), janSecs, [4]int64{2_000_001_007, 68, 1e9 * 60, 2_001_000_000})...)
	_, status, number, total, got := loadInvoice(t, pool, "acc_p", jan)
	if status != "final" || number == nil || total != sum(want) || !cmp.Equal(got, want) {
		t.Fatalf("issued: %s #%v total %d (want %d), diff (-got +want):\n%s", status, number, total, sum(want), cmp.Diff(got, want))
	}
	for i, l := range got {
		if l.Meter == "base" {
			t.Logf("line %2d %s %s: %d s of %d, %d cents", i+1, l.Tenant, planOfLine(t, pool, "acc_p", jan, i+1), l.Quantity, janSecs, l.Amount)
		}
	}
	t.Logf("acc_p January: %d lines, total %d cents", len(got), total)

	// The meters per period add up to the month's raw usage.
	for _, tenant := range []string{"ten_p", "ten_q"} {
		if m, raw := readMeters(t, pool, tenant, jan), rawSums(t, pool, tenant, jan); m != raw {
			t.Errorf("%s: meters %+v, raw sums %+v", tenant, m, raw)
		}
	}
}

func planOfLine(t *testing.T, pool querier, account string, month time.Time, n int) string {
	t.Helper()
	var p string
	if err := pool.QueryRow(context.Background(), `SELECT l.plan FROM invoice_lines l JOIN invoices i ON i.id = l.invoice_id
		WHERE i.account_id = $1 AND i.month = $2 AND i.kind = 'invoice' AND l.line = $3`, account, month, n).Scan(&p); err != nil {
		t.Fatal(err)
	}
	return p
}
