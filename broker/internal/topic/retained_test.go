package topic

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestRetainedSetGetDelete(t *testing.T) {
	r := NewRetained[string]()
	if replaced := r.Set("a/b", "v1", 10); replaced {
		t.Fatal("first Set reported replaced")
	}
	// [MQTT-3.3.1-5] a new retained message replaces the old one.
	if replaced := r.Set("a/b", "v2", 4); !replaced {
		t.Fatal("second Set did not report replaced")
	}
	r.Set("a", "v3", 3)
	r.Set("a//b", "v4", 5)
	if r.Len() != 3 || r.Bytes() != 12 {
		t.Fatalf("Len %d Bytes %d, want 3 12", r.Len(), r.Bytes())
	}
	if v, ok := r.Get("a/b"); !ok || v != "v2" {
		t.Fatalf("Get(a/b) = %q, %v", v, ok)
	}
	if _, ok := r.Get("a/b/c"); ok {
		t.Fatal("Get of an unset topic succeeded")
	}
	if _, ok := r.Get("a/"); ok {
		t.Fatal("Get(a/) found the message of a")
	}

	if !r.Delete("a/b") || r.Delete("a/b") || r.Delete("nope") {
		t.Fatal("Delete results wrong")
	}
	if r.Len() != 2 || r.Bytes() != 8 {
		t.Fatalf("after Delete Len %d Bytes %d, want 2 8", r.Len(), r.Bytes())
	}
	if v, ok := r.Get("a"); !ok || v != "v3" {
		t.Fatal("Delete of a/b removed its parent a")
	}
	r.Delete("a")
	r.Delete("a//b")
	if r.Len() != 0 || r.Bytes() != 0 || len(r.root.children) != 0 {
		t.Fatalf("not empty after deleting everything: len %d bytes %d children %d", r.Len(), r.Bytes(), len(r.root.children))
	}
}

func TestRetainedMatch(t *testing.T) {
	r := NewRetained[int]()
	topics := []string{
		"sport", "sport/", "sport/tennis", "sport/tennis/player1", "sport/tennis/player1/ranking",
		"sport/golf/player1", "/finance", "/", "a//b", "$SYS", "$SYS/monitor/Clients", "$SYS/load", "x/$y",
	}
	for i, tp := range topics {
		r.Set(tp, i, len(tp))
	}
	tests := []struct {
		filter string
		want   []string
	}{
		{"sport/#", []string{"sport", "sport/", "sport/golf/player1", "sport/tennis", "sport/tennis/player1", "sport/tennis/player1/ranking"}},
		{"sport/+", []string{"sport/", "sport/tennis"}},
		{"sport/+/player1", []string{"sport/golf/player1", "sport/tennis/player1"}},
		{"sport/tennis/player1/#", []string{"sport/tennis/player1", "sport/tennis/player1/ranking"}},
		{"+/+", []string{"/", "/finance", "sport/", "sport/tennis", "x/$y"}},
		{"/+", []string{"/", "/finance"}},
		{"+", []string{"sport"}},
		{"a/+/b", []string{"a//b"}},
		// [MQTT-4.7.2-1] wildcards at the first level skip '$' topics.
		{"#", []string{"/", "/finance", "a//b", "sport", "sport/", "sport/golf/player1", "sport/tennis", "sport/tennis/player1", "sport/tennis/player1/ranking", "x/$y"}},
		{"+/monitor/Clients", nil},
		{"$SYS/#", []string{"$SYS", "$SYS/load", "$SYS/monitor/Clients"}},
		{"$SYS/+", []string{"$SYS/load"}},
		{"x/+", []string{"x/$y"}},
		{"$share/g/sport/+", []string{"sport/", "sport/tennis"}},
		{"nothing/#", nil},
	}
	for _, tc := range tests {
		t.Run(tc.filter, func(t *testing.T) {
			var got []string
			if err := r.Match(tc.filter, func(topic string, v int) bool {
				if topics[v] != topic {
					t.Errorf("value %d delivered with topic %q", v, topic)
				}
				got = append(got, topic)
				return true
			}); err != nil {
				t.Fatal(err)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Match(%q) = %q, want %q", tc.filter, got, tc.want)
			}
			// Cross-check with the reference matcher.
			var brute []string
			f, _ := ParseFilter(tc.filter, 0)
			for _, tp := range topics {
				if bruteMatch(f.Path, tp) {
					brute = append(brute, tp)
				}
			}
			slices.Sort(brute)
			if !slices.Equal(got, brute) {
				t.Fatalf("Match(%q) = %q, bruteMatch %q", tc.filter, got, brute)
			}
		})
	}

	// fn returning false stops the walk.
	n := 0
	if err := r.Match("#", func(string, int) bool { n++; return n < 3 }); err != nil || n != 3 {
		t.Fatalf("early stop: visited %d, err %v", n, err)
	}
	if err := r.Match("a/#/b", func(string, int) bool { return true }); !errors.Is(err, ErrMultiLevel) {
		t.Fatalf("invalid filter error = %v", err)
	}
}

func TestRetainedConcurrent(t *testing.T) {
	r := NewRetained[int]()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 2000 {
			tp := "t/" + strings.Repeat("x", i%5)
			r.Set(tp, i, 1)
			if i%2 == 0 {
				r.Delete(tp)
			}
		}
	}()
	for range 500 {
		if err := r.Match("t/#", func(topic string, _ int) bool {
			if !strings.HasPrefix(topic, "t/") {
				t.Errorf("unexpected topic %q", topic)
			}
			return true
		}); err != nil {
			t.Fatal(err)
		}
	}
	<-done
	if r.Len() > 5 || r.Bytes() != int64(r.Len()) {
		t.Fatalf("Len %d Bytes %d", r.Len(), r.Bytes())
	}
}
