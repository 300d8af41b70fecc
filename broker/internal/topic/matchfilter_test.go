package topic

import (
	"math/rand/v2"
	"testing"
)

func TestMatchFilterTable(t *testing.T) {
	for _, tc := range []struct {
		filter, name string
		want         bool
	}{
		{"sport/#", "sport", true},
		{"sport/#", "sport/", true},
		{"sport/#", "sport/a/b", true},
		{"sport/#", "sports", false},
		{"sport/+", "sport/a", true},
		{"sport/+", "sport/", true},
		{"sport/+", "sport", false},
		{"sport/+", "sport/a/b", false},
		{"+/+", "/finance", true},
		{"+/+", "a/b", true},
		{"+/+", "finance", false},
		{"+", "a", true},
		{"+", "/a", false},
		{"#", "a/b", true},
		{"#", "$SYS/x", false},
		{"+/x", "$SYS/x", false},
		{"$SYS/#", "$SYS", true},
		{"$SYS/#", "$SYS/broker/load", true},
		{"a//b", "a//b", true},
		{"a/+/b", "a//b", true},
		{"a/b", "a/b/", false},
		{"a/b/", "a/b", false},
		{"a/b/c", "a/b", false},
		{"a/+/#", "a/x", true},
		{"a/+/#", "a", false},
		{"a", "a", true},
		{"a", "b", false},
	} {
		if got := MatchFilter(tc.filter, []byte(tc.name)); got != tc.want {
			t.Errorf("MatchFilter(%q, %q) = %v, want %v", tc.filter, tc.name, got, tc.want)
		}
	}
}

// MatchFilter agrees with the reference matcher on random filters and
// names.
func TestMatchFilterAgreesWithBrute(t *testing.T) {
	r := rand.New(rand.NewPCG(14, 1))
	for range 20_000 {
		f, n := randomFilter(r), randomTopic(r)
		if got, want := MatchFilter(f, []byte(n)), bruteMatch(f, n); got != want {
			t.Fatalf("MatchFilter(%q, %q) = %v, brute says %v", f, n, got, want)
		}
	}
}

func TestMatchFilterDoesNotAllocate(t *testing.T) {
	name := []byte("building/7/floor/3/temp")
	if n := testing.AllocsPerRun(100, func() {
		_ = MatchFilter("building/+/floor/#", name)
		_ = MatchFilter("building/7/floor/3/temp", name)
	}); n != 0 {
		t.Fatalf("%v allocations per match", n)
	}
}
