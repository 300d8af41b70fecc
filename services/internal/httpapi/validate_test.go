package httpapi

import (
	"strings"
	"testing"
)

func TestTopicProblem(t *testing.T) {
	for _, c := range []struct {
		s      string
		name   bool
		wantOK bool
	}{
		{"a/b/c", false, true},
		{"#", false, true},
		{"a/#", false, true},
		{"+/+/x", false, true},
		{"/", false, true},
		{"$SYS/#", false, true},
		{"a/#/b", false, false}, // [MQTT-4.7.1-2]
		{"a#", false, false},
		{"a/b#", false, false},
		{"a+/b", false, false}, // [MQTT-4.7.1-3]
		{"", false, false},     // [MQTT-4.7.3-1]
		{"a\x00b", false, false},
		{"\xff", false, false},
		{strings.Repeat("a", 65536), false, false},
		{"a/b", true, true},
		{"a/+", true, false}, // [MQTT-4.7.1-1]
		{"a/#", true, false},
	} {
		got := topicProblem(c.s, c.name)
		if (got == "") != c.wantOK {
			t.Errorf("topicProblem(%.20q, name=%v) = %q", c.s, c.name, got)
		}
	}
}

func TestSlugs(t *testing.T) {
	for _, c := range []struct {
		slug string
		ok   bool
	}{
		{"a", true}, {"factory-7", true}, {strings.Repeat("a", 63), true},
		{strings.Repeat("a", 64), false}, {"-a", false}, {"a-", false}, {"A", false}, {"a_b", false}, {"a.b", false}, {"", false}, {"www", false},
	} {
		var v validator
		checkSlug(&v, "slug", c.slug)
		if (v.err() == nil) != c.ok {
			t.Errorf("slug %q: %v", c.slug, v.err())
		}
	}
}

// TestTopicProblemAllocs pins the filter check to zero allocations (it
// runs for every ACL entry and every publish).
func TestTopicProblemAllocs(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { topicProblem("home/+/temp/#", false) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

func BenchmarkTopicProblem(b *testing.B) {
	f := "home/+/sensors/temperature/#"
	b.ReportAllocs()
	b.SetBytes(int64(len(f)))
	for b.Loop() {
		topicProblem(f, false)
	}
}
