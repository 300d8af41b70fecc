package acl

import (
	"errors"
	"testing"

	"berth.dev/broker/packet"
)

func TestCanPublish(t *testing.T) {
	a := &ACL{Pub: []string{"devices/d1/#", "cmd/+/reply", "exact"}}
	for _, tc := range []struct {
		topic string
		want  bool
	}{
		{"devices/d1", true}, // "#" includes the parent level
		{"devices/d1/temp", true},
		{"devices/d1/a/b/c", true},
		{"devices/d2/temp", false},
		{"devices", false},
		{"cmd/x/reply", true},
		{"cmd//reply", true}, // "+" matches an empty level
		{"cmd/x/y/reply", false},
		{"exact", true},
		{"exact/more", false},
		{"exac", false},
		{"", false},
	} {
		if got := a.CanPublish([]byte(tc.topic)); got != tc.want {
			t.Errorf("CanPublish(%q) = %v, want %v", tc.topic, got, tc.want)
		}
	}
	if (&ACL{}).CanPublish([]byte("a")) {
		t.Error("an empty list allowed a publish")
	}
}

func TestCanSubscribeRequiresCoverage(t *testing.T) {
	a := &ACL{Sub: []string{"sensors/#", "alerts/+/high", "+/status"}}
	for _, tc := range []struct {
		filter string
		want   bool
	}{
		{"sensors/#", true},
		{"sensors/+/temp", true},
		{"sensors", true},
		{"sensors/a/b", true},
		{"#", false},
		{"+/#", false},
		{"alerts/+/high", true},
		{"alerts/x/high", true},
		{"alerts/#", false},
		{"alerts/+/+", false},
		{"x/status", true},
		{"+/status", true},
		{"#/status", false},
		{"$SYS/status", false}, // a leading wildcard never covers '$' topics
		{"$share/g/sensors/+", true},
		{"$share/g/#", false},
		{"$share/nofilter", false},
	} {
		if got := a.CanSubscribe(tc.filter); got != tc.want {
			t.Errorf("CanSubscribe(%q) = %v, want %v", tc.filter, got, tc.want)
		}
	}
	if !(&ACL{Sub: []string{"#"}}).CanSubscribe("anything/+/#") {
		t.Error("'#' does not cover every ordinary filter")
	}
	if (&ACL{Sub: []string{"#"}}).CanSubscribe("$SYS/#") {
		t.Error("'#' covers $SYS")
	}
}

func TestParse(t *testing.T) {
	a, err := Parse([]byte(`{"pub":["a/#"],"sub":["b/+"]}`))
	if err != nil || len(a.Pub) != 1 || a.Sub[0] != "b/+" {
		t.Fatalf("Parse = %+v, %v", a, err)
	}
	if _, err := Parse([]byte(`{"pub":`)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("truncated JSON: err = %v, want ErrInvalid", err)
	}
	for _, bad := range []string{`{"pub":["a/#/b"]}`, `{"sub":["a+/b"]}`, `{"sub":[""]}`} {
		if _, err := Parse([]byte(bad)); !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%s): err = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestChecksAllocateNothing(t *testing.T) {
	a := &ACL{Pub: []string{"x/#", "devices/+/telemetry"}, Sub: []string{"devices/#"}}
	topic := []byte("devices/d1/telemetry")
	if n := testing.AllocsPerRun(1000, func() {
		if !a.CanPublish(topic) || !a.CanSubscribe("devices/+/telemetry") {
			t.Fatal("check failed")
		}
	}); n != 0 {
		t.Fatalf("allocs per check = %v, want 0", n)
	}
}

func FuzzCoversAgreesWithLevelMatching(f *testing.F) {
	for _, s := range [][2]string{{"a/#", "a/b"}, {"+/b", "a/b"}, {"#", "$x"}, {"a/+", "a/+"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, allowed, topic string) {
		// For a topic name (no wildcards) coverage is plain matching: check
		// against a reference that splits into levels.
		for _, c := range topic {
			if c == '+' || c == '#' {
				return
			}
		}
		if !packet.ValidTopicFilter([]byte(allowed)) {
			return // Parse refuses it: an access list holds filters only
		}
		if got, want := covers(allowed, topic), refMatch(allowed, topic); got != want {
			t.Fatalf("covers(%q, %q) = %v, reference says %v", allowed, topic, got, want)
		}
	})
}

func refMatch(filter, topic string) bool {
	fl, tl := split(filter), split(topic)
	if len(tl) > 0 && len(tl[0]) > 0 && tl[0][0] == '$' && len(fl) > 0 && (fl[0] == "+" || fl[0] == "#") {
		return false
	}
	for i, l := range fl {
		if l == "#" {
			return true
		}
		if i >= len(tl) {
			return false
		}
		if l != "+" && l != tl[i] {
			return false
		}
	}
	return len(fl) == len(tl)
}

func split(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '/' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}

func BenchmarkCanPublish(b *testing.B) {
	a := &ACL{Pub: []string{"cmd/#", "devices/+/telemetry/#"}}
	topic := []byte("devices/d1/telemetry/temp")
	b.ReportAllocs()
	for b.Loop() {
		a.CanPublish(topic)
	}
}
