package topic

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

var (
	filterLevels = []string{"a", "b", "", "$s", "+", "#", "+"}
	topicLevels  = []string{"a", "b", "", "$s"}
)

func randomFilter(r *rand.Rand) string {
	n := 1 + r.IntN(4)
	ls := make([]string, n)
	for i := range ls {
		ls[i] = filterLevels[r.IntN(len(filterLevels))]
		if ls[i] == "#" && i != n-1 {
			ls[i] = "+"
		}
	}
	if s := strings.Join(ls, "/"); s != "" {
		return s
	}
	return "a" // a one-level empty name or filter is invalid [MQTT-4.7.3-1]
}

func randomTopic(r *rand.Rand) string {
	n := 1 + r.IntN(4)
	ls := make([]string, n)
	for i := range ls {
		ls[i] = topicLevels[r.IntN(len(topicLevels))]
	}
	if s := strings.Join(ls, "/"); s != "" {
		return s
	}
	return "a" // a one-level empty name or filter is invalid [MQTT-4.7.3-1]
}

// model is the brute-force picture of what the tree should hold.
type model map[SubscriberID]map[string]Options

// expect computes the non-shared deliveries (normalised as in
// assertDeliveries) and the set of share groups that must each deliver
// one copy.
func (md model) expect(topic string, pub SubscriberID) (want []Delivery, groups map[string][]entry) {
	groups = map[string][]entry{}
	for c, subs := range md {
		d := Delivery{Subscriber: c}
		matched := false
		for raw, o := range subs {
			f, _ := ParseFilter(raw, 0)
			if !bruteMatch(f.Path, topic) {
				continue
			}
			if f.Shared() {
				groups[f.ShareName+" "+f.Path] = append(groups[f.ShareName+" "+f.Path], entry{c, o})
				continue
			}
			if o.NoLocal && c == pub {
				continue
			}
			matched = true
			d.QoS = max(d.QoS, o.QoS)
			d.RetainAsPublished = d.RetainAsPublished || o.RetainAsPublished
			if o.SubscriptionID != 0 {
				d.SubscriptionIDs = append(d.SubscriptionIDs, o.SubscriptionID)
			}
		}
		if matched {
			want = append(want, d)
		}
	}
	slices.SortFunc(want, func(a, b Delivery) int { return int(a.Subscriber) - int(b.Subscriber) })
	return want, groups
}

func TestTreeAgainstBruteForce(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 42))
			tr := New(Config{})
			md := model{}
			var m Matches
			for op := range 400 {
				c := SubscriberID(1 + r.IntN(12))
				switch k := r.IntN(10); {
				case k < 6:
					raw := randomFilter(r)
					o := Options{QoS: byte(r.IntN(3)), RetainAsPublished: r.IntN(2) == 0}
					if r.IntN(2) == 0 {
						o.SubscriptionID = uint32(1 + r.IntN(1000))
					}
					if r.IntN(4) == 0 {
						raw = fmt.Sprintf("$share/g%d/%s", r.IntN(2), raw)
					} else {
						o.NoLocal = r.IntN(3) == 0
					}
					existed, err := tr.Subscribe(c, raw, o)
					if err != nil {
						t.Fatalf("Subscribe(%q): %v", raw, err)
					}
					_, had := md[c][raw]
					if existed != had {
						t.Fatalf("op %d: Subscribe(%d, %q) existed = %v, model %v", op, c, raw, existed, had)
					}
					if md[c] == nil {
						md[c] = map[string]Options{}
					}
					md[c][raw] = o
				case k < 8 && len(md[c]) > 0:
					raws := make([]string, 0, len(md[c]))
					for raw := range md[c] {
						raws = append(raws, raw)
					}
					slices.Sort(raws)
					raw := raws[r.IntN(len(raws))]
					if existed, err := tr.Unsubscribe(c, raw); err != nil || !existed {
						t.Fatalf("Unsubscribe(%d, %q) = %v, %v", c, raw, existed, err)
					}
					delete(md[c], raw)
				case k == 8:
					if n := tr.RemoveClient(c); n != len(md[c]) {
						t.Fatalf("RemoveClient(%d) = %d, model %d", c, n, len(md[c]))
					}
					delete(md, c)
				}
				if tr.Count(c) != len(md[c]) {
					t.Fatalf("Count(%d) = %d, model %d", c, tr.Count(c), len(md[c]))
				}

				topic := randomTopic(r)
				pub := SubscriberID(r.IntN(14))
				tr.Match([]byte(topic), pub, &m)
				want, groups := md.expect(topic, pub)
				var plain []Delivery
				shared := map[string]int{}
				for _, d := range m.Deliveries {
					if d.ShareName == "" {
						plain = append(plain, d)
						continue
					}
					// The receiver must be a member of a matching group of that name.
					ok := false
					for key, members := range groups {
						if !strings.HasPrefix(key, d.ShareName+" ") {
							continue
						}
						for _, e := range members {
							if e.client == d.Subscriber && e.opts.QoS == d.QoS {
								ok = true
								shared[key]++
								break
							}
						}
						if ok {
							break
						}
					}
					if !ok {
						t.Fatalf("op %d topic %q: shared delivery %+v to a non-member", op, topic, d)
					}
				}
				if got := countShared(m.Deliveries); got != len(groups) {
					t.Fatalf("op %d topic %q: %d shared deliveries, want one per group: %v", op, topic, got, groups)
				}
				assertDeliveries(t, plain, want)
			}
		})
	}
}

// FuzzFilterMatch checks filter validation against the reference
// validator, and Tree and Retained matching against bruteMatch.
func FuzzFilterMatch(f *testing.F) {
	for _, tc := range matchCases {
		f.Add(tc.filter, tc.topic)
	}
	f.Add("$share/g/a/#", "a/b")
	f.Add("a/#/b", "a/x/b")
	f.Add("a+/b", "a+/b")
	f.Fuzz(func(t *testing.T, filter, topic string) {
		pf, err := ParseFilter(filter, 0)
		// Reference: split off $share/{name}/ by hand, then validate the
		// rest as a plain filter.
		shareOK, path := true, filter
		if rest, ok := strings.CutPrefix(filter, "$share/"); ok {
			var name string
			name, path, ok = strings.Cut(rest, "/")
			shareOK = ok && name != "" && !strings.ContainsAny(name, "+#")
			if err == nil && (pf.ShareName != name || pf.Path != path) {
				t.Fatalf("ParseFilter(%q) = %+v", filter, pf)
			}
		}
		// U+0000 is refused anywhere, the share name too [MQTT-4.7.3-2].
		valid := shareOK && bruteValidPath(path) && utf8.ValidString(filter) && len(filter) <= 65535 &&
			!strings.ContainsRune(filter, 0)
		if (err == nil) != valid {
			t.Fatalf("ParseFilter(%q) error %v, reference valid %v (share ok %v)", filter, err, valid, shareOK)
		}
		if err != nil || ValidateTopicName([]byte(topic), 0) != nil {
			return
		}
		want := bruteMatch(pf.Path, topic)

		tr := New(Config{})
		if _, err := tr.Subscribe(1, filter, Options{QoS: 1, SubscriptionID: 3}); err != nil {
			t.Fatal(err)
		}
		var m Matches
		tr.Match([]byte(topic), 2, &m)
		if got := len(m.Deliveries) == 1; got != want || len(m.Deliveries) > 1 {
			t.Fatalf("Tree: filter %q topic %q: %+v, want match %v", filter, topic, m.Deliveries, want)
		}
		if existed, _ := tr.Unsubscribe(1, filter); !existed || tr.Len() != 0 || !tr.root.empty() {
			t.Fatalf("Unsubscribe(%q) left state: existed %v len %d", filter, existed, tr.Len())
		}

		r := NewRetained[struct{}]()
		r.Set(topic, struct{}{}, len(topic))
		got := false
		if err := r.Match(filter, func(string, struct{}) bool { got = true; return true }); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("Retained: filter %q topic %q: got %v, want %v", filter, topic, got, want)
		}
	})
}
