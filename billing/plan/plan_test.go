package plan

import (
	"errors"
	"testing"
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
	for _, f := range Fields {
		for _, bad := range []int64{0, -1, *f.Get(&p.Max) + 1} {
			q := p.Defaults
			*f.Get(&q) = bad
			var be *BoundError
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
