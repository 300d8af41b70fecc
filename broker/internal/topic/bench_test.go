package topic

import (
	"fmt"
	"testing"
)

// benchTree builds a tree of n subscriptions, one client each, in a tenant
// shaped like a device fleet: site/{s}/dev/{d}/{metric}.
func benchTree(b *testing.B, n int, mix string) (*Tree, [][]byte) {
	b.Helper()
	tr := New(Config{})
	metrics := []string{"temp", "hum", "power", "state"}
	for i := range n {
		site, dev, metric := i%100, i, metrics[i%len(metrics)]
		var f string
		kind := mix
		if mix == "mixed" {
			kind = []string{"exact", "plus", "hash"}[i%3]
		}
		switch kind {
		case "exact":
			f = fmt.Sprintf("site/%d/dev/%d/%s", site, dev, metric)
		case "plus":
			f = fmt.Sprintf("site/%d/dev/+/%s", site, metrics[(i/100)%len(metrics)])
		case "hash":
			f = fmt.Sprintf("site/%d/dev/%d/#", site, dev%1000)
		}
		if _, err := tr.Subscribe(SubscriberID(i), f, Options{QoS: byte(i % 3), SubscriptionID: uint32(i%7 + 1)}); err != nil {
			b.Fatal(err)
		}
	}
	topics := make([][]byte, 1024)
	for i := range topics {
		dev := (i * 7919) % n
		topics[i] = fmt.Appendf(nil, "site/%d/dev/%d/%s", dev%100, dev, metrics[dev%len(metrics)])
	}
	return tr, topics
}

func BenchmarkMatch(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		for _, mix := range []string{"exact", "plus", "hash", "mixed"} {
			b.Run(fmt.Sprintf("subs=%d/%s", n, mix), func(b *testing.B) {
				tr, topics := benchTree(b, n, mix)
				var m Matches
				b.SetBytes(int64(len(topics[0])))
				b.ReportAllocs()
				deliveries := 0
				for i := 0; b.Loop(); i++ {
					tr.Match(topics[i%len(topics)], 1, &m)
					deliveries += len(m.Deliveries)
				}
				b.ReportMetric(float64(deliveries)/float64(b.N), "deliveries/op")
			})
		}
	}
}

// BenchmarkMatchFanOut is one topic with n subscribers on one filter, plus
// a '#' on the same clients so every match aggregates overlaps.
func BenchmarkMatchFanOut(b *testing.B) {
	for _, n := range []int{1_000, 10_000} {
		for _, overlap := range []bool{false, true} {
			b.Run(fmt.Sprintf("subs=%d/overlap=%v", n, overlap), func(b *testing.B) {
				tr := New(Config{})
				for i := range n {
					mustSubscribe(b, tr, SubscriberID(i), "news/today", Options{QoS: 1, SubscriptionID: 1})
					if overlap {
						mustSubscribe(b, tr, SubscriberID(i), "news/#", Options{QoS: 2, SubscriptionID: 2})
					}
				}
				topic := []byte("news/today")
				var m Matches
				b.SetBytes(int64(len(topic)))
				b.ReportAllocs()
				for b.Loop() {
					tr.Match(topic, 1, &m)
				}
				if len(m.Deliveries) != n {
					b.Fatalf("deliveries = %d, want %d", len(m.Deliveries), n)
				}
			})
		}
	}
}

func BenchmarkMatchShared(b *testing.B) {
	tr := New(Config{})
	for i := range 1000 {
		mustSubscribe(b, tr, SubscriberID(i), fmt.Sprintf("$share/g%d/jobs/+", i%10), Options{QoS: 1})
	}
	topic := []byte("jobs/resize")
	m := Matches{Ready: func(id SubscriberID) bool { return id%3 != 0 }}
	b.SetBytes(int64(len(topic)))
	b.ReportAllocs()
	for b.Loop() {
		tr.Match(topic, 1, &m)
	}
	if len(m.Deliveries) != 10 {
		b.Fatalf("deliveries = %d, want 10", len(m.Deliveries))
	}
}

func BenchmarkSubscribeUnsubscribe(b *testing.B) {
	tr, _ := benchTree(b, 10_000, "mixed")
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		f := fmt.Sprintf("site/%d/dev/%d/temp", i%100, i%5000)
		if _, err := tr.Subscribe(1_000_000, f, Options{QoS: 1}); err != nil {
			b.Fatal(err)
		}
		if _, err := tr.Unsubscribe(1_000_000, f); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRetainedMatch(b *testing.B) {
	r := NewRetained[int]()
	for i := range 100_000 {
		r.Set(fmt.Sprintf("site/%d/dev/%d/temp", i%100, i), i, 64)
	}
	for _, filter := range []string{"site/42/dev/4242/temp", "site/42/dev/+/temp", "site/42/#"} {
		b.Run(filter, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(filter)))
			n := 0
			for b.Loop() {
				if err := r.Match(filter, func(string, int) bool { n++; return true }); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
