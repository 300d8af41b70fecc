package topic

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
)

// matchCases are the filter/topic examples of MQTT v5 §4.7 and v3.1.1
// §4.7, plus edge cases around empty levels and '$'.
var matchCases = []struct {
	filter, topic string
	want          bool
}{
	// §4.7.1.2 multi-level wildcard.
	{"sport/tennis/player1/#", "sport/tennis/player1", true},
	{"sport/tennis/player1/#", "sport/tennis/player1/ranking", true},
	{"sport/tennis/player1/#", "sport/tennis/player1/score/wimbledon", true},
	{"sport/#", "sport", true}, // '#' includes the parent level
	{"sport/#", "sport/", true},
	{"sport/#", "sports", false},
	{"sport/#", "sport/tennis/player1", true},
	{"#", "sport", true},
	{"#", "/", true},
	{"#", "/finance", true},
	{"/#", "/", true},
	{"/#", "/a/b", true},
	{"/#", "a", false},
	{"a/b/#", "a", false},
	// §4.7.1.3 single-level wildcard.
	{"sport/tennis/+", "sport/tennis/player1", true},
	{"sport/tennis/+", "sport/tennis/player2", true},
	{"sport/tennis/+", "sport/tennis/player1/ranking", false},
	{"sport/+", "sport", false},
	{"sport/+", "sport/", true}, // '+' matches an empty level
	{"+/+", "/finance", true},
	{"/+", "/finance", true},
	{"+", "/finance", false},
	{"+", "finance", true},
	{"+/+", "/", true},
	{"+", "/", false},
	{"a/+/c", "a//c", true},
	{"a/+/c", "a/b/c", true},
	{"a/+/c", "a/b/c/d", false},
	{"+/tennis/#", "sport/tennis/player1", true},
	{"+/tennis/#", "sport/tennis", true},
	{"+/tennis/#", "sport/golf", false},
	{"+/+/+", "a/b", false},
	{"+/#", "a", true},
	{"+/#", "a/b/c", true},
	// Empty levels are levels [MQTT-4.7.1-1].
	{"a//b", "a//b", true},
	{"a//b", "a/b", false},
	{"/a", "/a", true},
	{"/a", "a", false},
	{"a/", "a/", true},
	{"a/", "a", false},
	{"a", "a/", false},
	// §4.7.2 topics beginning with '$' [MQTT-4.7.2-1].
	{"#", "$SYS/monitor/Clients", false},
	{"+/monitor/Clients", "$SYS/monitor/Clients", false},
	{"$SYS/#", "$SYS/monitor/Clients", true},
	{"$SYS/monitor/+", "$SYS/monitor/Clients", true},
	{"$SYS/#", "$SYS", true},
	{"$SYS", "$SYS", true},
	{"+", "$SYS", false},
	{"#", "$", false},
	{"+/#", "$SYS/x", false},
	{"a/#", "a/$x", true},  // the rule is for the first level only
	{"a/+", "a/$x", true},  // the rule is for the first level only
	{"+/$x", "a/$x", true}, // '$' later in a topic is an ordinary character
	// §4.7.3 case sensitive, exact.
	{"ACCOUNTS", "Accounts", false},
	{"Accounts payable", "Accounts payable", true},
	{"sport/ tennis", "sport/tennis", false},
	{"/finance", "finance", false},
}

func TestMatchSpecTable(t *testing.T) {
	for _, tc := range matchCases {
		t.Run(tc.filter+" vs "+tc.topic, func(t *testing.T) {
			if got := bruteMatch(tc.filter, tc.topic); got != tc.want {
				t.Fatalf("bruteMatch = %v, want %v (reference matcher disagrees with the spec table)", got, tc.want)
			}
			tr := New(Config{})
			mustSubscribe(t, tr, 1, tc.filter, Options{QoS: 1})
			var m Matches
			tr.Match([]byte(tc.topic), 99, &m)
			if got := len(m.Deliveries) == 1; got != tc.want {
				t.Fatalf("Tree match = %v (%+v), want %v", got, m.Deliveries, tc.want)
			}
			// The same filter as a shared subscription matches the same way.
			mustSubscribe(t, tr, 2, "$share/g/"+tc.filter, Options{QoS: 1})
			tr.Match([]byte(tc.topic), 99, &m)
			if got := countShared(m.Deliveries); (got == 1) != tc.want {
				t.Fatalf("shared match count = %d, want match %v", got, tc.want)
			}
			// Retained index: the reverse direction.
			r := NewRetained[int]()
			r.Set(tc.topic, 7, 1)
			got := false
			if err := r.Match(tc.filter, func(topic string, v int) bool {
				got = topic == tc.topic && v == 7
				return true
			}); err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("Retained match = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSubscribeReplaceAndExisted(t *testing.T) {
	tr := New(Config{})
	existed, err := tr.Subscribe(1, "a/+", Options{QoS: 0, SubscriptionID: 5})
	if err != nil || existed {
		t.Fatalf("first Subscribe = %v, %v; want false, nil", existed, err)
	}
	// [MQTT-3.8.4-3] the same filter replaces the subscription.
	existed, err = tr.Subscribe(1, "a/+", Options{QoS: 2, SubscriptionID: 6})
	if err != nil || !existed {
		t.Fatalf("second Subscribe = %v, %v; want true, nil", existed, err)
	}
	if n := tr.Count(1); n != 1 {
		t.Fatalf("Count = %d, want 1", n)
	}
	var m Matches
	tr.Match([]byte("a/b"), 0, &m)
	want := []Delivery{{Subscriber: 1, QoS: 2, SubscriptionIDs: []uint32{6}}}
	assertDeliveries(t, m.Deliveries, want)

	subs := tr.Subscriptions(1, nil)
	if len(subs) != 1 || subs[0].Filter.Raw != "a/+" || subs[0].Options.QoS != 2 || subs[0].Options.SubscriptionID != 6 {
		t.Fatalf("Subscriptions = %+v", subs)
	}
}

func TestSubscribeErrors(t *testing.T) {
	tr := New(Config{MaxLevels: 4})
	tests := []struct {
		filter string
		opts   Options
		err    error
	}{
		{"a/#/b", Options{}, ErrMultiLevel},
		{"a+", Options{}, ErrSingleLevel},
		{"", Options{}, ErrEmpty},
		{"a/b/c/d/e", Options{}, ErrTooManyLevels},
		{"$share/g/a", Options{NoLocal: true}, ErrSharedNoLocal}, // [MQTT-3.8.3-4]
		{"$share//a", Options{}, ErrShareName},
	}
	for _, tc := range tests {
		if _, err := tr.Subscribe(1, tc.filter, tc.opts); !errors.Is(err, tc.err) {
			t.Errorf("Subscribe(%q) = %v, want %v", tc.filter, err, tc.err)
		}
	}
	if tr.Len() != 0 || tr.Count(1) != 0 {
		t.Fatalf("failed subscribes were stored: Len %d Count %d", tr.Len(), tr.Count(1))
	}
	if _, err := tr.Unsubscribe(1, "a/#/b"); !errors.Is(err, ErrMultiLevel) {
		t.Fatalf("Unsubscribe invalid = %v", err)
	}
}

func TestUnsubscribeAndRemoveClient(t *testing.T) {
	tr := New(Config{})
	for _, f := range []string{"a/b", "a/+", "#", "$share/g/a/b", "a/b/c/d"} {
		mustSubscribe(t, tr, 1, f, Options{QoS: 1})
	}
	mustSubscribe(t, tr, 2, "a/b", Options{QoS: 0})
	if tr.Count(1) != 5 || tr.Count(2) != 1 || tr.Len() != 6 {
		t.Fatalf("Count(1)=%d Count(2)=%d Len=%d", tr.Count(1), tr.Count(2), tr.Len())
	}

	var raws []string
	for _, s := range tr.Subscriptions(1, nil) {
		if s.Client != 1 || s.Options.QoS != 1 {
			t.Fatalf("Subscriptions entry %+v", s)
		}
		raws = append(raws, s.Filter.Raw)
	}
	slices.Sort(raws)
	if want := []string{"#", "$share/g/a/b", "a/+", "a/b", "a/b/c/d"}; !slices.Equal(raws, want) {
		t.Fatalf("Subscriptions filters = %q, want %q", raws, want)
	}

	existed, err := tr.Unsubscribe(1, "a/+")
	if err != nil || !existed {
		t.Fatalf("Unsubscribe = %v, %v", existed, err)
	}
	existed, _ = tr.Unsubscribe(1, "a/+")
	if existed {
		t.Fatal("second Unsubscribe reported existed")
	}
	// [MQTT-3.10.4-1] compared character by character: "a/b/#" is not "a/+".
	if existed, _ := tr.Unsubscribe(1, "a/b/#"); existed {
		t.Fatal("Unsubscribe of a filter never subscribed reported existed")
	}
	if existed, _ := tr.Unsubscribe(3, "a/b"); existed {
		t.Fatal("Unsubscribe by another client reported existed")
	}

	if n := tr.RemoveClient(1); n != 4 {
		t.Fatalf("RemoveClient = %d, want 4", n)
	}
	if tr.Count(1) != 0 || tr.Len() != 1 {
		t.Fatalf("after RemoveClient Count(1)=%d Len=%d", tr.Count(1), tr.Len())
	}
	var m Matches
	tr.Match([]byte("a/b"), 0, &m)
	assertDeliveries(t, m.Deliveries, []Delivery{{Subscriber: 2, QoS: 0}})

	tr.RemoveClient(2)
	// Pruning leaves an empty root behind.
	if r := tr.root; !r.empty() {
		t.Fatalf("root not empty after removing everything: %+v", r)
	}
}

func TestOverlappingSubscriptions(t *testing.T) {
	tr := New(Config{})
	// Client 1: three overlapping filters, two with identifiers.
	mustSubscribe(t, tr, 1, "sport/#", Options{QoS: 0, SubscriptionID: 10})
	mustSubscribe(t, tr, 1, "sport/+/player1", Options{QoS: 2, SubscriptionID: 11})
	mustSubscribe(t, tr, 1, "sport/tennis/player1", Options{QoS: 1, RetainAsPublished: true})
	// Client 2: one filter.
	mustSubscribe(t, tr, 2, "+/tennis/#", Options{QoS: 1, SubscriptionID: 20})
	// Client 3: NoLocal on one of two overlapping filters.
	mustSubscribe(t, tr, 3, "sport/tennis/+", Options{QoS: 2, NoLocal: true, SubscriptionID: 30})
	mustSubscribe(t, tr, 3, "sport/#", Options{QoS: 0, SubscriptionID: 31})
	// Client 4: only a NoLocal subscription.
	mustSubscribe(t, tr, 4, "sport/tennis/player1", Options{QoS: 1, NoLocal: true})

	var m Matches
	tr.Match([]byte("sport/tennis/player1"), 3, &m)
	want := []Delivery{
		// [MQTT-3.3.4-2] max QoS; [MQTT-3.3.4-3], [MQTT-3.3.4-4] all ids.
		{Subscriber: 1, QoS: 2, RetainAsPublished: true, SubscriptionIDs: []uint32{10, 11}},
		{Subscriber: 2, QoS: 1, SubscriptionIDs: []uint32{20}},
		// [MQTT-3.8.3-3] the NoLocal subscription does not match its own
		// publish; the other one still does.
		{Subscriber: 3, QoS: 0, SubscriptionIDs: []uint32{31}},
		{Subscriber: 4, QoS: 1},
	}
	assertDeliveries(t, m.Deliveries, want)

	// Published by client 4: its only subscription is NoLocal.
	tr.Match([]byte("sport/tennis/player1"), 4, &m)
	want = []Delivery{
		{Subscriber: 1, QoS: 2, RetainAsPublished: true, SubscriptionIDs: []uint32{10, 11}},
		{Subscriber: 2, QoS: 1, SubscriptionIDs: []uint32{20}},
		{Subscriber: 3, QoS: 2, SubscriptionIDs: []uint32{30, 31}},
	}
	assertDeliveries(t, m.Deliveries, want)

	// The result buffers are reused: a smaller match leaves nothing behind.
	tr.Match([]byte("sport"), 4, &m)
	want = []Delivery{
		{Subscriber: 1, QoS: 0, SubscriptionIDs: []uint32{10}},
		{Subscriber: 3, QoS: 0, SubscriptionIDs: []uint32{31}},
	}
	assertDeliveries(t, m.Deliveries, want)
	tr.Match([]byte("nothing/here"), 4, &m)
	assertDeliveries(t, m.Deliveries, nil)
}

func TestSharedAndNonSharedBothDeliver(t *testing.T) {
	tr := New(Config{})
	mustSubscribe(t, tr, 1, "a/b", Options{QoS: 0, SubscriptionID: 1})
	mustSubscribe(t, tr, 1, "$share/g/a/+", Options{QoS: 1, SubscriptionID: 2})
	var m Matches
	tr.Match([]byte("a/b"), 0, &m)
	// v5 §4.8.2: the non-shared copy plus the group's copy.
	want := []Delivery{
		{Subscriber: 1, QoS: 0, SubscriptionIDs: []uint32{1}},
		{Subscriber: 1, QoS: 1, SubscriptionIDs: []uint32{2}, ShareName: "g"},
	}
	assertDeliveries(t, m.Deliveries, want)
}

func TestSharedRoundRobin(t *testing.T) {
	tr := New(Config{})
	for c := SubscriberID(1); c <= 3; c++ {
		mustSubscribe(t, tr, c, "$share/workers/jobs/+", Options{QoS: 1})
	}
	// A second group on the same filter gets its own copy.
	mustSubscribe(t, tr, 10, "$share/audit/jobs/#", Options{QoS: 0})

	var m Matches
	got := map[SubscriberID]int{}
	for range 30 {
		tr.Match([]byte("jobs/1"), 0, &m)
		if len(m.Deliveries) != 2 {
			t.Fatalf("deliveries = %+v, want one per group", m.Deliveries)
		}
		for _, d := range m.Deliveries {
			got[d.Subscriber]++
		}
	}
	want := map[SubscriberID]int{1: 10, 2: 10, 3: 10, 10: 30}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("round robin counts = %v, want %v", got, want)
	}

	// A member leaves: the others share everything, the leaver gets none.
	if existed, _ := tr.Unsubscribe(2, "$share/workers/jobs/+"); !existed {
		t.Fatal("Unsubscribe of a member reported not existed")
	}
	clear(got)
	for range 20 {
		tr.Match([]byte("jobs/2"), 0, &m)
		for _, d := range m.Deliveries {
			if d.ShareName == "workers" {
				got[d.Subscriber]++
			}
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(map[SubscriberID]int{1: 10, 3: 10}) {
		t.Fatalf("after leave counts = %v", got)
	}

	// Disconnect without session state: RemoveClient drops membership.
	tr.RemoveClient(1)
	tr.RemoveClient(3)
	tr.Match([]byte("jobs/3"), 0, &m)
	assertDeliveries(t, m.Deliveries, []Delivery{{Subscriber: 10, QoS: 0, ShareName: "audit"}})
}

func TestSharedSkipsStalledMembers(t *testing.T) {
	tr := New(Config{})
	for c := SubscriberID(1); c <= 4; c++ {
		mustSubscribe(t, tr, c, "$share/g/t", Options{QoS: 1, SubscriptionID: uint32(c)})
	}
	stalled := map[SubscriberID]bool{2: true, 3: true}
	m := Matches{Ready: func(id SubscriberID) bool { return !stalled[id] }}
	got := map[SubscriberID]int{}
	for range 40 {
		tr.Match([]byte("t"), 0, &m)
		if len(m.Deliveries) != 1 {
			t.Fatalf("deliveries = %+v, want exactly one", m.Deliveries)
		}
		d := m.Deliveries[0]
		if !slices.Equal(d.SubscriptionIDs, []uint32{uint32(d.Subscriber)}) {
			t.Fatalf("member %d got ids %v", d.Subscriber, d.SubscriptionIDs)
		}
		got[d.Subscriber]++
	}
	if got[2] != 0 || got[3] != 0 || got[1] == 0 || got[4] == 0 || got[1]+got[4] != 40 {
		t.Fatalf("stalled members received messages or ready ones starved: %v", got)
	}
	if diff := got[1] - got[4]; diff < -10 || diff > 10 {
		t.Fatalf("ready members unevenly served: %v", got)
	}

	// Nobody ready: the message still goes to one member (queued there).
	stalled[1], stalled[4] = true, true
	tr.Match([]byte("t"), 0, &m)
	if len(m.Deliveries) != 1 {
		t.Fatalf("no-ready deliveries = %+v, want one", m.Deliveries)
	}
}

func TestMatchZeroAllocs(t *testing.T) {
	tr := New(Config{})
	for c := SubscriberID(1); c <= 200; c++ {
		mustSubscribe(t, tr, c, fmt.Sprintf("dev/%d/+", c%20), Options{QoS: 1, SubscriptionID: uint32(c)})
		mustSubscribe(t, tr, c, "dev/#", Options{QoS: 0})
		mustSubscribe(t, tr, c, "$share/g/dev/+/temp", Options{QoS: 1, SubscriptionID: 7})
	}
	m := Matches{Ready: func(SubscriberID) bool { return true }}
	topic := []byte("dev/3/temp")
	tr.Match(topic, 5, &m) // warm the buffers
	if len(m.Deliveries) != 201 {
		t.Fatalf("deliveries = %d, want 201", len(m.Deliveries))
	}
	if n := testing.AllocsPerRun(200, func() { tr.Match(topic, 5, &m) }); n != 0 {
		t.Fatalf("Match allocates %v times per call, want 0", n)
	}
}

func TestConcurrentSubscribeMatch(t *testing.T) {
	tr := New(Config{})
	const writers, readers, rounds = 4, 4, 300
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			c := SubscriberID(w + 1)
			for i := range rounds {
				f := fmt.Sprintf("x/%d/+", i%7)
				if _, err := tr.Subscribe(c, f, Options{QoS: 1}); err != nil {
					t.Error(err)
					return
				}
				if _, err := tr.Subscribe(c, "$share/g/x/#", Options{}); err != nil {
					t.Error(err)
					return
				}
				if i%3 == 0 {
					tr.RemoveClient(c)
				} else if _, err := tr.Unsubscribe(c, f); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	// A permanent subscriber every match must see.
	mustSubscribe(t, tr, 100, "x/#", Options{QoS: 2})
	for range readers {
		wg.Go(func() {
			var m Matches
			for i := range rounds * 3 {
				tr.Match(fmt.Appendf(nil, "x/%d/y", i%7), 0, &m)
				if !slices.ContainsFunc(m.Deliveries, func(d Delivery) bool { return d.Subscriber == 100 && d.QoS == 2 }) {
					t.Errorf("match %d lost the permanent subscriber: %+v", i, m.Deliveries)
					return
				}
				if countShared(m.Deliveries) > 1 {
					t.Errorf("share group delivered %d copies", countShared(m.Deliveries))
					return
				}
			}
		})
	}
	wg.Wait()
	for w := range writers {
		tr.RemoveClient(SubscriberID(w + 1))
	}
	if tr.Len() != 1 || tr.Count(100) != 1 {
		t.Fatalf("after cleanup Len=%d Count(100)=%d", tr.Len(), tr.Count(100))
	}
}

func mustSubscribe(t testing.TB, tr *Tree, c SubscriberID, filter string, o Options) {
	t.Helper()
	if _, err := tr.Subscribe(c, filter, o); err != nil {
		t.Fatalf("Subscribe(%d, %q): %v", c, filter, err)
	}
}

func countShared(ds []Delivery) int {
	n := 0
	for _, d := range ds {
		if d.ShareName != "" {
			n++
		}
	}
	return n
}

// assertDeliveries compares ignoring the order of deliveries and of
// subscription ids, which Match does not promise.
func assertDeliveries(t *testing.T, got, want []Delivery) {
	t.Helper()
	norm := func(ds []Delivery) string {
		ds = slices.Clone(ds)
		slices.SortStableFunc(ds, func(a, b Delivery) int {
			if c := strings.Compare(a.ShareName, b.ShareName); c != 0 {
				return c
			}
			return cmp.Compare(a.Subscriber, b.Subscriber)
		})
		out := ""
		for _, d := range ds {
			ids := slices.Clone(d.SubscriptionIDs)
			slices.Sort(ids)
			out += fmt.Sprintf("{sub %d qos %d rap %v ids %v share %q}\n", d.Subscriber, d.QoS, d.RetainAsPublished, ids, d.ShareName)
		}
		return out
	}
	if g, w := norm(got), norm(want); g != w {
		t.Fatalf("deliveries:\ngot:\n%swant:\n%s", g, w)
	}
}
