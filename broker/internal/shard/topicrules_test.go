package shard

import (
	"fmt"
	"testing"
	"time"

	"berth.dev/broker/internal/topicrule"
	"berth.dev/broker/packet"
)

// twentyRules is a tenant with 20 topic rules; the benchmark topic
// (site/7/line/3/temp) is governed by the last, least specific one, which
// has a rate that never refuses, so admission walks every rule and takes
// a token.
func twentyRules(tb testing.TB) *topicrule.Set {
	tb.Helper()
	var rules []topicrule.Rule
	for i := range 19 {
		rules = append(rules, topicrule.Rule{ID: fmt.Sprint("top_", i), Filter: fmt.Sprintf("site/%d/line/+/#", i+10),
			RetainedAllowed: true, MaxMessageSize: 1 << 20, HasRetention: true, Retention: time.Hour})
	}
	rules = append(rules, topicrule.Rule{ID: "top_site", Filter: "site/#", RetainedAllowed: true, MaxMsgsPerSec: 1e12,
		HasRetention: true, Retention: time.Hour})
	s, skipped := topicrule.NewSet(rules, nil)
	if len(skipped) > 0 {
		tb.Fatalf("skipped %v", skipped)
	}
	return s
}

func admissionCases(tb testing.TB) []struct {
	name  string
	rules *topicrule.Set
} {
	return []struct {
		name  string
		rules *topicrule.Set
	}{{"no rules", nil}, {"20 rules", twentyRules(tb)}}
}

// Admitting a PUBLISH, and checking a logged message against its rule's
// retention, allocate nothing, with no rules and with 20.
func TestTopicRuleAdmissionAllocations(t *testing.T) {
	for _, tc := range admissionCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			s := New(Options{SysInterval: -1})
			s.SetTopicRules(tc.rules)
			c := &conn{shard: s, version: packet.Version5}
			p := packet.Publish{Topic: []byte("site/7/line/3/temp"), QoS: 1, Payload: make([]byte, 64)}
			if code, _, err := c.admitPublish(p.Topic, &p, new(time.Now())); code != packet.CodeSuccess || err != nil {
				t.Fatalf("admitted with %v, %v", code, err)
			}
			now := time.Now().UnixNano()
			allocs := testing.AllocsPerRun(1000, func() {
				if code, _, _ := c.admitPublish(p.Topic, &p, new(time.Now())); code != packet.CodeSuccess {
					t.Fatalf("refused %v", code)
				}
				if s.pastRuleRetention(p.Topic, now, now) {
					t.Fatal("a message of now is past an hour's retention")
				}
			})
			if allocs != 0 {
				t.Fatalf("admission allocates %v times per message", allocs)
			}
		})
	}
}

func BenchmarkAdmitPublish(b *testing.B) {
	for _, tc := range admissionCases(b) {
		b.Run(tc.name, func(b *testing.B) {
			s := New(Options{SysInterval: -1})
			s.SetTopicRules(tc.rules)
			c := &conn{shard: s, version: packet.Version5}
			p := packet.Publish{Topic: []byte("site/7/line/3/temp"), QoS: 1, Payload: make([]byte, 64)}
			b.ReportAllocs()
			b.SetBytes(int64(len(p.Payload)))
			for b.Loop() {
				if code, _, _ := c.admitPublish(p.Topic, &p, new(time.Now())); code != packet.CodeSuccess {
					b.Fatalf("refused %v", code)
				}
			}
		})
	}
}
