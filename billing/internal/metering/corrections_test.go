package metering

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/testenv"
)

// corrLine is a correction's line as the test checks it.
type corrLine struct {
	Line, AmendsLine                     int
	Tenant, Meter                        string
	Quantity, Included, Billable, Amount int64
	RateCents, RatePer                   int64
}

type correction struct {
	ID     string
	Number int64
	Total  int64
	Lines  []corrLine
}

// corrections returns the corrections amending invoice id, oldest first.
func corrections(t *testing.T, pool *pgxpool.Pool, id string) []correction {
	t.Helper()
	ctx := context.Background()
	rows, err := pool.Query(ctx, `SELECT id, number, total_cents FROM invoices
		WHERE kind = 'correction' AND amends = $1 AND status = 'final' ORDER BY number`, id)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (correction, error) {
		var c correction
		return c, r.Scan(&c.ID, &c.Number, &c.Total)
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range out {
		rows, err := pool.Query(ctx, `SELECT line, amends_line, tenant_id, meter, quantity, included, billable, amount_cents,
			coalesce(rate_cents, 0), coalesce(rate_per, 0) FROM invoice_lines WHERE invoice_id = $1 ORDER BY line`, out[i].ID)
		if err != nil {
			t.Fatal(err)
		}
		out[i].Lines, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (corrLine, error) {
			var l corrLine
			return l, r.Scan(&l.Line, &l.AmendsLine, &l.Tenant, &l.Meter, &l.Quantity, &l.Included, &l.Billable, &l.Amount, &l.RateCents, &l.RatePer)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestLateUsageBilledByOneCorrection walks January 2026 with a controlled
// clock: the invoice is issued after the grace; usage that lands later is
// billed by exactly one correction amending it, with only the difference
// (the added quantities at the invoice's rates and included amounts,
// amounts computed here apart from the code), numbered next in the one
// sequence; a run killed mid-correction leaves nothing, two workers at once
// issue one, a run after it issues nothing; late usage that changes no
// amount waits for the next correction that does; after the correction
// window nothing is corrected any more.
func TestLateUsageBilledByOneCorrection(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	var clock atomic.Pointer[time.Time]
	set := func(v time.Time) { clock.Store(&v) }
	cfg := Config{Grace: time.Hour, CorrectionWindow: 72 * time.Hour, Now: func() time.Time { return *clock.Load() }}
	w1, w2 := New(pool, cfg, quietLog()), New(pool, cfg, quietLog())
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	jan := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	feb := jan.AddDate(0, 1, 0)
	seedTenant(t, pool, "acc_a", "ten_a_pro", "pro", jan)
	seedTenant(t, pool, "acc_f", "ten_f_free", "free", jan)
	// pro: 150M messages (50M over the 100M included), 99 GB transfer (of 100 included).
	must(flush(ctx, pool,
		usageRow{"ten_a_pro", "n1", jan.Add(48 * time.Hour), 150_000_000, 60e9, 39e9, 0, 0},
		usageRow{"ten_f_free", "n1", jan.Add(48 * time.Hour), 10, 0, 0, 0, 0},
	))
	set(feb.Add(time.Hour))
	if r, err := w1.RunOnce(ctx); err != nil || r.Finalized != 2 || r.Corrected != 0 {
		t.Fatalf("run after the grace: %+v, %v; want two invoices issued, nothing corrected", r, err)
	}
	invID, status, number, total, lines := loadInvoice(t, pool, "acc_a", jan)
	if status != "final" || total != 4900+1000 {
		t.Fatalf("January: %s, total %d; want final, 5900", status, total)
	}
	if lines[1].Meter != "messages" || lines[4].Meter != "transfer" {
		t.Fatalf("lines %+v", lines)
	}
	freeID, _, _, _, _ := loadInvoice(t, pool, "acc_f", jan)

	// Late usage (a node's flush retried after the grace): 30,000,001 more
	// messages, 6 GB more transfer (1 GB of it still included); on the free
	// plan, 5 more messages (nothing to charge).
	must(flush(ctx, pool,
		usageRow{"ten_a_pro", "n2", time.Date(2026, 1, 31, 23, 59, 0, 0, time.UTC), 30_000_001, 4e9, 2e9, 0, 0},
		usageRow{"ten_f_free", "n2", time.Date(2026, 1, 31, 23, 59, 0, 0, time.UTC), 5, 0, 0, 0, 0},
	))
	set(feb.Add(2 * time.Hour))

	// A worker killed mid-correction (its connection terminated, or its
	// context cancelled): its transaction rolls back.
	for name, kill := range map[string]hook{
		"connection terminated": func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `SELECT pg_terminate_backend(pg_backend_pid())`)
			return err
		},
		"context cancelled": func(context.Context, pgx.Tx) error { return context.Canceled },
	} {
		if _, err := correct(ctx, pool, invID, *clock.Load(), kill); err == nil {
			t.Fatalf("%s: the correction succeeded", name)
		}
		if c := corrections(t, pool, invID); len(c) != 0 {
			t.Fatalf("%s: a killed run left corrections: %+v", name, c)
		}
	}

	// Two workers at once (the advisory lock is the leader's; RunOnce is
	// safe without it): one correction.
	var wg sync.WaitGroup
	reports := make([]Report, 2)
	errs := make([]error, 2)
	for i, w := range []*Worker{w1, w2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reports[i], errs[i] = w.RunOnce(ctx)
		}()
	}
	wg.Wait()
	must(errors.Join(errs...))
	if n := reports[0].Corrected + reports[1].Corrected; n != 1 {
		t.Fatalf("two concurrent runs issued %d corrections, want 1 (%+v)", n, reports)
	}
	pro := prices["pro"]
	msgDue := roundHalfUp(mul(180_000_001-pro.included[0], pro.rate[0][0]), mul(pro.rate[0][1])) // 80,000,001 billable: 1600
	xferDue := roundHalfUp(mul(105e9-pro.included[3], pro.rate[3][0]), mul(pro.rate[3][1]))      // 5 GB billable: 25
	want := []corrLine{
		{1, 2, "ten_a_pro", "messages", 30_000_001, 0, 30_000_001, msgDue - 1000, 20, 1_000_000},
		{2, 5, "ten_a_pro", "transfer", 6e9, 1e9, 5e9, xferDue - 0, 5, 1e9},
	}
	got := corrections(t, pool, invID)
	if len(got) != 1 || got[0].Number != *number+2 || got[0].Total != 600+25 || !cmp.Equal(got[0].Lines, want) {
		t.Fatalf("corrections %+v, want one numbered %d, total 625, lines diff (-got +want):\n%s", got, *number+2,
			cmp.Diff(got[0].Lines, want))
	}
	t.Logf("January's invoice %d: %d cents; late usage corrected by correction %d: %d cents (%d lines)",
		*number, total, got[0].Number, got[0].Total, len(got[0].Lines))
	if c := corrections(t, pool, freeID); len(c) != 0 {
		t.Fatalf("the free plan's late usage charged nothing, yet got %+v", c)
	}
	if _, _, _, total2, lines2 := loadInvoice(t, pool, "acc_a", jan); total2 != total || !cmp.Equal(lines2, lines) {
		t.Fatal("the issued invoice changed")
	}

	// Again: nothing new.
	if r, err := w1.RunOnce(ctx); err != nil || r.Corrected != 0 || len(corrections(t, pool, invID)) != 1 {
		t.Fatalf("run after the correction: %+v, %v", r, err)
	}

	// One more message changes no amount (1600.00004 cents rounds to
	// 1600): no correction yet; with 2,500,000 more, the next one bills
	// both, for the 50 cents they add.
	must(flush(ctx, pool, usageRow{"ten_a_pro", "n2", time.Date(2026, 1, 31, 23, 59, 0, 0, time.UTC), 1, 0, 0, 0, 0}))
	if r, err := w1.RunOnce(ctx); err != nil || r.Corrected != 0 {
		t.Fatalf("run after one late message: %+v, %v; want no correction", r, err)
	}
	must(flush(ctx, pool, usageRow{"ten_a_pro", "n1", time.Date(2026, 1, 20, 0, 0, 0, 0, time.UTC), 2_500_000, 0, 0, 0, 0}))
	if r, err := w1.RunOnce(ctx); err != nil || r.Corrected != 1 {
		t.Fatalf("run after 2,500,001 late messages: %+v, %v; want one correction", r, err)
	}
	got = corrections(t, pool, invID)
	due := roundHalfUp(mul(182_500_002-pro.included[0], pro.rate[0][0]), mul(pro.rate[0][1]))
	want2 := []corrLine{{1, 2, "ten_a_pro", "messages", 2_500_001, 0, 2_500_001, due - msgDue, 20, 1_000_000}}
	if len(got) != 2 || got[1].Total != 50 || !cmp.Equal(got[1].Lines, want2) {
		t.Fatalf("second correction %+v, diff:\n%s", got, cmp.Diff(got[len(got)-1].Lines, want2))
	}

	// Past the correction window (72 h after the month's end), late usage
	// is left alone.
	must(flush(ctx, pool, usageRow{"ten_a_pro", "n3", time.Date(2026, 1, 31, 23, 59, 0, 0, time.UTC), 50_000_000, 0, 0, 0, 0}))
	set(feb.Add(73 * time.Hour))
	if r, err := w1.RunOnce(ctx); err != nil || r.Corrected != 0 || len(corrections(t, pool, invID)) != 2 {
		t.Fatalf("run after the window: %+v, %v", r, err)
	}
}
