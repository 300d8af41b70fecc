package topicrule

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"berth.dev/broker/internal/topic"
)

func set(t *testing.T, filters ...string) *Set {
	t.Helper()
	rules := make([]Rule, len(filters))
	for i, f := range filters {
		rules[i] = Rule{ID: "top_" + f, Filter: f, RetainedAllowed: true}
	}
	s, skipped := NewSet(rules, nil)
	if len(skipped) > 0 {
		t.Fatalf("skipped %v", skipped)
	}
	return s
}

// The precedence table of the package comment (and docs/topic-rules.md):
// for each topic, the rule that governs it among all the filters given.
func TestPrecedence(t *testing.T) {
	all := []string{"#", "+/+/+", "a/#", "a/+/#", "a/b/#", "a/+/c", "a/b/+", "+/b/c", "a/b/c", "a/b/c/#", "x/+", "x/#", "$SYS/#", "+/y"}
	for _, tc := range []struct {
		topic, want string
		why         string
	}{
		{"a/b/c", "a/b/c", "an exact topic beats every wildcard"},
		{"a/b/d", "a/b/+", "2 literal levels, no '#', and 'b' before '+'"},
		{"a/x/c", "a/+/c", "2 literal levels and no '#' beat a/# and +/+/+"},
		{"z/b/c", "+/b/c", "2 literal levels"},
		{"a/b/c/d", "a/b/c/#", "3 literal levels"},
		{"a/b", "a/b/#", "'#' matches the parent level"},
		{"a/x", "a/+/#", "1 literal level each: a/+/# has more levels than a/#"},
		{"a", "a/#", "a/+/# needs a second level"},
		{"q/r/s", "+/+/+", "3 levels beat 1"},
		{"q", "#", "the catch-all"},
		{"x/y", "x/+", "x/+, +/y and x/# have 1 literal level: no '#' first, then the literal leftmost"},
		{"$SYS/x", "$SYS/#", "wildcards at the first level do not match '$' topics"},
		{"$other", "", "nor does '#'"},
	} {
		got := ""
		if r := set(t, all...).Match([]byte(tc.topic)); r != nil {
			got = r.Filter
		}
		if got != tc.want {
			t.Errorf("topic %q: rule %q, want %q (%s)", tc.topic, got, tc.want, tc.why)
		}
	}
}

// The choice does not depend on the order the rules come in, and the
// winner is always a matching filter that no other matching filter
// outranks.
func TestPrecedenceIsIndependentOfOrder(t *testing.T) {
	filters := []string{"#", "+", "+/+", "a/#", "a/+", "+/b", "a/b", "a/b/#", "+/+/#", "a/+/#", "+/b/#", "a//b", "a/+/+", "+/+/c"}
	topics := []string{"a", "a/b", "a/b/c", "x/b", "a/x", "a//b", "x/y/c", "a/b/c/d", ""}
	r := rand.New(rand.NewPCG(1, 2))
	want := map[string]string{}
	for i := range 50 {
		shuffled := slices.Clone(filters)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		s := set(t, shuffled...)
		for _, tp := range topics {
			got := ""
			if m := s.Match([]byte(tp)); m != nil {
				got = m.Filter
			}
			if i == 0 {
				want[tp] = got
			} else if got != want[tp] {
				t.Fatalf("order %v: topic %q gets %q, another order %q", shuffled, tp, got, want[tp])
			}
		}
	}
	for i, a := range filters {
		for _, b := range filters[i+1:] {
			if ab, ba := compare(a, b), compare(b, a); ab == 0 || (ab < 0) == (ba < 0) {
				t.Fatalf("compare(%q, %q) = %d, compare(%q, %q) = %d: not a strict order", a, b, ab, b, a, ba)
			}
		}
	}
}

func TestNewSetSkipsFiltersThatMatchNothing(t *testing.T) {
	s, skipped := NewSet([]Rule{
		{ID: "top_1", Filter: "ok/#"},
		{ID: "top_2", Filter: "$share/g/x"},
		{ID: "top_3", Filter: "a/#/b"},
		{ID: "top_4", Filter: ""},
	}, nil)
	if s.Len() != 1 || len(skipped) != 3 {
		t.Fatalf("kept %d, skipped %v", s.Len(), skipped)
	}
	if none, _ := NewSet(nil, nil); none != nil || none.Match([]byte("a")) != nil || none.HasRetention() || none.Len() != 0 {
		t.Fatal("an empty set must be nil and match nothing")
	}
}

// A reload keeps a rule's rate bucket, so changing another rule (or this
// one's rate) does not hand out a fresh second of messages.
func TestReloadKeepsTheRateBucket(t *testing.T) {
	rules := []Rule{{ID: "top_r", Filter: "r/#", MaxMsgsPerSec: 2}}
	s1, _ := NewSet(rules, nil)
	now := time.Now()
	r := s1.Match([]byte("r/x"))
	for i, want := range []bool{true, true, false} {
		if got := r.AllowMessage(now); got != want {
			t.Fatalf("message %d at one instant under a 2/s rule: allowed %v", i+1, got)
		}
	}
	s2, _ := NewSet(append(rules, Rule{ID: "top_other", Filter: "o/#"}), s1)
	if s2.Match([]byte("r/x")).AllowMessage(now) {
		t.Fatal("a reload refilled the bucket")
	}
	s3, _ := NewSet([]Rule{{ID: "top_r", Filter: "r/#", MaxMsgsPerSec: 0}}, s2)
	if !s3.Match([]byte("r/x")).AllowMessage(now) {
		t.Fatal("a rule without a rate refuses")
	}
	if d := s3.Match([]byte("r/x")).ReserveMessage(now); d != 0 {
		t.Fatalf("a rule without a rate throttles for %v", d)
	}
}

func TestExpired(t *testing.T) {
	now := time.Now().UnixNano()
	kept := Rule{HasRetention: true, Retention: time.Minute}
	none := Rule{HasRetention: true, Retention: 0}
	quota := Rule{}
	if kept.Expired(now-int64(30*time.Second), now) || !kept.Expired(now-int64(2*time.Minute), now) {
		t.Fatal("a 60 s retention")
	}
	if !none.Expired(now-1, now) {
		t.Fatal("a retention of 0 keeps nothing for later")
	}
	if quota.Expired(0, now) {
		t.Fatal("no retention of its own: only the tenant's applies")
	}
}

// Matching 20 rules allocates nothing.
func TestMatchDoesNotAllocate(t *testing.T) {
	s := twentyRules()
	name := []byte("site/7/line/3/temp")
	if n := testing.AllocsPerRun(100, func() { _ = s.Match(name) }); n != 0 {
		t.Fatalf("%v allocations per match", n)
	}
}

func twentyRules() *Set {
	var rules []Rule
	for i := range 19 {
		rules = append(rules, Rule{ID: fmt.Sprint("top_", i), Filter: fmt.Sprintf("site/%d/line/+/#", i+10), RetainedAllowed: true})
	}
	rules = append(rules, Rule{ID: "top_all", Filter: "site/#", RetainedAllowed: true, MaxMsgsPerSec: 1e9})
	s, _ := NewSet(rules, nil)
	return s
}

func BenchmarkMatch20(b *testing.B) {
	s := twentyRules()
	name := []byte("site/7/line/3/temp")
	b.ReportAllocs()
	for b.Loop() {
		_ = s.Match(name)
	}
}

// Match (with its prefix shortcut) picks what a plain scan picks: the
// smallest by compare among the filters topic.MatchFilter accepts.
func TestMatchAgreesWithAPlainScan(t *testing.T) {
	filters := []string{"#", "+", "+/+", "a/#", "a/+", "+/b", "a/b", "a/b/#", "+/+/#", "a/+/#", "+/b/#", "a//b", "a/+/+", "+/+/c", "a/", "/#", "$s/#", "a/b/c"}
	levels := []string{"a", "b", "c", "", "$s"}
	s := set(t, filters...)
	r := rand.New(rand.NewPCG(3, 4))
	for range 5000 {
		n := 1 + r.IntN(4)
		name := ""
		for i := range n {
			if i > 0 {
				name += "/"
			}
			name += levels[r.IntN(len(levels))]
		}
		if name == "" {
			continue
		}
		want := ""
		for _, f := range filters {
			if topic.MatchFilter(f, []byte(name)) && (want == "" || compare(f, want) < 0) {
				want = f
			}
		}
		got := ""
		if m := s.Match([]byte(name)); m != nil {
			got = m.Filter
		}
		if got != want {
			t.Fatalf("topic %q: Match %q, plain scan %q", name, got, want)
		}
	}
}
