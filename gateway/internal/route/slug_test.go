package route

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// waitForSlug polls LookupSlug until check holds.
func waitForSlug(t *testing.T, tb *Table, slug string, check func(Route, error) bool) {
	t.Helper()
	pollRoute(t, "LookupSlug("+slug+")", func() (Route, error) { return tb.LookupSlug(context.Background(), slug) }, check)
}

// TestLookupSlug: a tenant's route by slug carries its node's public host,
// costs no query once cached, follows a rename and a deletion (through
// berth_placement, as the API announces them), and an unknown slug is
// cached for NegativeTTL.
func TestLookupSlug(t *testing.T) {
	pool, sc := countedPool(t, func(sql string) bool { return !strings.HasPrefix(sql, "LISTEN") }) // every statement but LISTEN's
	exec(t, pool, `UPDATE nodes SET public_host = 'node-1.hosts.example.net' WHERE id = 'node_1'`)
	now := time.Now()
	var clock atomic.Int64 // seconds added to now
	tb := start(t, pool, Options{TTL: time.Hour, NegativeTTL: 5 * time.Second,
		Now: func() time.Time { return now.Add(time.Duration(clock.Load()) * time.Second) }})
	ctx := context.Background()

	r, err := tb.LookupSlug(ctx, "placed")
	if err != nil || r.TenantID != "ten_placed" || r.NodeID != "node_1" || r.PublicHost != "node-1.hosts.example.net" {
		t.Fatalf("LookupSlug(placed) = %+v, %v", r, err)
	}
	before := sc.n.Load()
	for range 100 {
		if r, err := tb.LookupSlug(ctx, "placed"); err != nil || r.PublicHost != "node-1.hosts.example.net" {
			t.Fatalf("cached LookupSlug = %+v, %v", r, err)
		}
	}
	if n := sc.n.Load() - before; n != 0 {
		t.Fatalf("100 lookups of a cached slug ran %d statements, want 0", n)
	}

	if _, err := tb.LookupSlug(ctx, "unplaced"); !errors.Is(err, ErrNotPlaced) {
		t.Fatalf("LookupSlug(unplaced) = %v, want ErrNotPlaced", err)
	}

	t.Run("an unknown slug is cached for NegativeTTL", func(t *testing.T) {
		if _, err := tb.LookupSlug(ctx, "later"); !errors.Is(err, ErrNoTenant) {
			t.Fatalf("LookupSlug(later) = %v, want ErrNoTenant", err)
		}
		exec(t, pool, `INSERT INTO tenants (id, account_id, slug, plan, node_id) VALUES ('ten_later', 'acc_1', 'later', 'free', 'node_2')`)
		before := sc.n.Load()
		if _, err := tb.LookupSlug(ctx, "later"); !errors.Is(err, ErrNoTenant) || sc.n.Load() != before {
			t.Fatalf("within NegativeTTL: %v after %d statements, want the cached ErrNoTenant", err, sc.n.Load()-before)
		}
		clock.Add(6)
		if r, err := tb.LookupSlug(ctx, "later"); err != nil || r.TenantID != "ten_later" {
			t.Fatalf("after NegativeTTL: %+v, %v", r, err)
		}
	})
	t.Run("a tenant created after a probe of its name is found on its NOTIFY", func(t *testing.T) {
		if _, err := tb.LookupSlug(ctx, "fresh"); !errors.Is(err, ErrNoTenant) {
			t.Fatalf("LookupSlug(fresh) = %v, want ErrNoTenant", err)
		}
		if _, err, ok := tb.CachedSlug("fresh"); !ok || !errors.Is(err, ErrNoTenant) {
			t.Fatalf("CachedSlug(fresh) = %v, %v: want the cached ErrNoTenant", err, ok)
		}
		// As the API creates a tenant with a node: the row, then the NOTIFY.
		exec(t, pool, `INSERT INTO tenants (id, account_id, slug, plan, node_id) VALUES ('ten_fresh', 'acc_1', 'fresh', 'free', 'node_1')`)
		exec(t, pool, `SELECT pg_notify('berth_placement', 'ten_fresh')`)
		// The clock stands still: well within NegativeTTL.
		waitForSlug(t, tb, "fresh", func(r Route, err error) bool { return err == nil && r.TenantID == "ten_fresh" })
	})
	t.Run("CachedSlug answers only from the cache", func(t *testing.T) {
		if _, _, ok := tb.CachedSlug("never-asked"); ok {
			t.Fatal("CachedSlug answered a slug never looked up")
		}
		tb.LookupSlug(ctx, "unplaced") // its ErrNotPlaced expired with the clock
		before := sc.n.Load()
		if r, err, ok := tb.CachedSlug("fresh"); !ok || err != nil || r.TenantID != "ten_fresh" {
			t.Fatalf("CachedSlug(fresh) = %+v, %v, %v", r, err, ok)
		}
		if r, err, ok := tb.CachedSlug("unplaced"); !ok || !errors.Is(err, ErrNotPlaced) || r.TenantID != "ten_unplaced" {
			t.Fatalf("CachedSlug(unplaced) = %+v, %v, %v", r, err, ok)
		}
		if n := sc.n.Load() - before; n != 0 {
			t.Fatalf("CachedSlug ran %d statements", n)
		}
		exec(t, pool, `SELECT pg_notify('berth_placement', 'ten_fresh')`)
		deadline := time.Now().Add(5 * time.Second)
		for _, _, ok := tb.CachedSlug("fresh"); ok; _, _, ok = tb.CachedSlug("fresh") {
			if time.Now().After(deadline) {
				t.Fatal("CachedSlug still answers 5 s after the tenant's NOTIFY")
			}
			time.Sleep(5 * time.Millisecond) // polling with a deadline
		}
	})
	t.Run("a rename moves the name", func(t *testing.T) {
		exec(t, pool, `UPDATE tenants SET slug = 'renamed' WHERE id = 'ten_placed'`)
		exec(t, pool, `SELECT pg_notify('berth_placement', 'ten_placed')`)
		waitForSlug(t, tb, "placed", func(_ Route, err error) bool { return errors.Is(err, ErrNoTenant) })
		if r, err := tb.LookupSlug(ctx, "renamed"); err != nil || r.TenantID != "ten_placed" {
			t.Fatalf("LookupSlug(renamed) = %+v, %v", r, err)
		}
	})
	t.Run("a rename whose NOTIFY has not arrived is read again", func(t *testing.T) {
		// ten_later takes the freed slug with no NOTIFY yet: its cached
		// route still says "later", so slug and route are read afresh.
		clock.Add(6)
		exec(t, pool, `UPDATE tenants SET slug = 'placed' WHERE id = 'ten_later'`)
		if r, err := tb.LookupSlug(ctx, "placed"); err != nil || r.TenantID != "ten_later" {
			t.Fatalf("LookupSlug(placed) = %+v, %v", r, err)
		}
		exec(t, pool, `UPDATE tenants SET slug = 'later' WHERE id = 'ten_later'`)
		exec(t, pool, `SELECT pg_notify('berth_placement', 'ten_later')`)
		waitForSlug(t, tb, "placed", func(_ Route, err error) bool { return errors.Is(err, ErrNoTenant) })
		exec(t, pool, `UPDATE tenants SET slug = 'placed' WHERE id = 'ten_placed'`)
		exec(t, pool, `SELECT pg_notify('berth_placement', 'ten_placed')`)
		clock.Add(6) // past the NXDOMAIN just cached
		waitForSlug(t, tb, "placed", func(r Route, err error) bool { return err == nil && r.TenantID == "ten_placed" })
	})
	t.Run("a deleted tenant's slug is gone", func(t *testing.T) {
		exec(t, pool, `DELETE FROM tenants WHERE id = 'ten_placed'`)
		exec(t, pool, `SELECT pg_notify('berth_placement', 'ten_placed')`)
		waitForSlug(t, tb, "placed", func(_ Route, err error) bool { return errors.Is(err, ErrNoTenant) })
	})
}
