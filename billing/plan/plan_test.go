package plan

import (
	"errors"
	"testing"

	"berth.dev/quotas"
)

func TestDefaultsLieWithinEveryPlansBounds(t *testing.T) {
	for _, name := range Names() {
		p, err := Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Check(p.Defaults); err != nil {
			t.Errorf("%s: defaults out of bounds: %v", name, err)
		}
	}
}

func TestCheckNamesTheOffendingQuota(t *testing.T) {
	p, _ := Lookup("free")
	for _, f := range quotas.Fields {
		for _, bad := range []int64{0, -1, *f.Get(&p.Max) + 1} {
			q := p.Defaults
			*f.Get(&q) = bad
			var be *quotas.BoundError
			if err := p.Check(q); !errors.As(err, &be) || be.Field != f.Name || be.Value != bad {
				t.Errorf("%s=%d: err = %v, want BoundError on that field", f.Name, bad, err)
			}
		}
	}
}

func TestUnknownPlan(t *testing.T) {
	if _, err := Lookup("platinum"); !errors.Is(err, ErrUnknown) {
		t.Fatalf("err = %v, want ErrUnknown", err)
	}
}

// An account's tenant cap is the largest among its plans', and every plan
// allows an account at least its first tenant (the one signup makes).
func TestTenantCap(t *testing.T) {
	for _, name := range Names() {
		p, _ := Lookup(name)
		if p.TenantsPerAccount < 1 {
			t.Errorf("%s: TenantsPerAccount %d, want at least 1", name, p.TenantsPerAccount)
		}
	}
	for _, c := range []struct {
		plans []string
		want  int
	}{
		{[]string{"free"}, 3},
		{[]string{"free", "pro"}, 25},
		{[]string{"business", "free"}, 250},
		{[]string{"free", "pro", "business"}, 250},
	} {
		if got, err := TenantCap(c.plans); err != nil || got != c.want {
			t.Errorf("TenantCap(%v) = %d, %v; want %d", c.plans, got, err, c.want)
		}
	}
	if _, err := TenantCap([]string{"free", "gold"}); !errors.Is(err, ErrUnknown) {
		t.Errorf("unknown plan: err %v, want ErrUnknown", err)
	}
	if _, err := TenantCap(nil); err == nil {
		t.Error("no plans: no error")
	}
}
