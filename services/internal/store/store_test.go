package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"berth.dev/billing/plan"
	"berth.dev/services/internal/store"
	"berth.dev/testenv"
)

func newAccount(t *testing.T, st *store.Store) string {
	t.Helper()
	free, _ := plan.Lookup("free")
	su := &store.Signup{
		Account: store.Account{ID: store.NewID(store.PrefixAccount), Email: store.NewID("u") + "@example.com", PasswordHash: "x"},
		KeyID:   store.NewID(store.PrefixAPIKey), KeyHash: []byte(store.NewID("h")),
		Tenant: store.Tenant{ID: store.NewID(store.PrefixTenant), Slug: "first-" + store.NewID("s")[2:10], Plan: "free"},
		Quotas: free.Defaults,
	}
	if err := st.CreateSignup(context.Background(), su); err != nil {
		t.Fatal(err)
	}
	return su.Account.ID
}

func TestNewID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := store.NewID(store.PrefixTenant)
		if len(id) != len("ten_")+16 || seen[id] {
			t.Fatalf("id %q", id)
		}
		for _, c := range id[4:] {
			if !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
				t.Fatalf("id %q is not lowercase base32", id)
			}
		}
		seen[id] = true
	}
}

// TestPlacementRespectsCapacity: a full node takes no more tenants, and
// concurrent placements never overfill a node.
func TestPlacementRespectsCapacity(t *testing.T) {
	st := store.New(testenv.Postgres(t))
	ctx := context.Background()
	acc := newAccount(t, st) // placed nowhere: no nodes yet
	if err := st.UpsertNode(ctx, store.Node{ID: "n1", MQTTAddr: "a:1", AdminAddr: "a:2", Capacity: 3, HeartbeatAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	free, _ := plan.Lookup("free")
	var wg sync.WaitGroup
	nodes := make([]*string, 6)
	errs := make([]error, 6)
	for i := range nodes {
		wg.Go(func() {
			tn := store.Tenant{ID: store.NewID(store.PrefixTenant), AccountID: acc, Slug: fmt.Sprintf("t%d", i), Plan: "free"}
			errs[i] = st.CreateTenant(ctx, &tn, free.Defaults, 100)
			nodes[i] = tn.NodeID
		})
	}
	wg.Wait()
	placed := 0
	for i := range nodes {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if nodes[i] != nil {
			placed++
		}
	}
	if placed != 3 {
		t.Fatalf("%d tenants placed on a node of capacity 3", placed)
	}
}

func TestConflictsNameTheField(t *testing.T) {
	st := store.New(testenv.Postgres(t))
	ctx := context.Background()
	acc := newAccount(t, st)
	free, _ := plan.Lookup("free")
	tn := store.Tenant{ID: store.NewID(store.PrefixTenant), AccountID: acc, Slug: "dup", Plan: "free"}
	if err := st.CreateTenant(ctx, &tn, free.Defaults, 100); err != nil {
		t.Fatal(err)
	}
	tn.ID = store.NewID(store.PrefixTenant)
	err := st.CreateTenant(ctx, &tn, free.Defaults, 100)
	var ce *store.ConflictError
	if !errors.As(err, &ce) || ce.Field != "slug" || !errors.Is(err, store.ErrConflict) {
		t.Fatalf("err %v", err)
	}
	if _, err := st.GetTenant(ctx, "acc_other", tn.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("foreign get: %v", err)
	}
}

// TestTenantLimitUnderConcurrency: creations in one account serialize, so
// concurrent ones never take more places than the limit leaves, and each
// refusal names the limit.
func TestTenantLimitUnderConcurrency(t *testing.T) {
	st := store.New(testenv.Postgres(t))
	ctx := context.Background()
	acc := newAccount(t, st) // one tenant already
	free, _ := plan.Lookup("free")
	const limit, tries = 4, 12
	errs := make([]error, tries)
	var wg sync.WaitGroup
	for i := range tries {
		wg.Go(func() {
			tn := store.Tenant{ID: store.NewID(store.PrefixTenant), AccountID: acc, Slug: fmt.Sprintf("race-%d", i), Plan: "free"}
			errs[i] = st.CreateTenant(ctx, &tn, free.Defaults, limit)
		})
	}
	wg.Wait()
	created := 0
	for _, err := range errs {
		var le *store.TenantLimitError
		switch {
		case err == nil:
			created++
		case errors.As(err, &le) && le.Limit == limit:
		default:
			t.Fatalf("err %v, want nil or a TenantLimitError of %d", err, limit)
		}
	}
	if created != limit-1 {
		t.Fatalf("%d created, want %d", created, limit-1)
	}
	ts, _, err := st.ListTenants(ctx, acc, store.Page{Limit: 100})
	if err != nil || len(ts) != limit {
		t.Fatalf("account has %d tenants (%v), want %d", len(ts), err, limit)
	}
}
