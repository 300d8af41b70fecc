package topic

import (
	"bytes"
	"math/bits"
)

// Delivery is one copy of a message to send: to one subscriber, at most
// at QoS, carrying SubscriptionIDs.
type Delivery struct {
	Subscriber SubscriberID
	// QoS is the maximum QoS over all the subscriber's matching
	// non-shared subscriptions [MQTT-3.3.4-2], or the QoS of the shared
	// subscription. The server delivers at min(message QoS, QoS).
	QoS byte
	// RetainAsPublished is true if any matching subscription asked to
	// keep the RETAIN flag (the union: a flag one subscription asked for
	// is never lost because another overlaps it).
	RetainAsPublished bool
	// SubscriptionIDs are the identifiers of all matching subscriptions
	// that have one, in no particular order [MQTT-3.3.4-3],
	// [MQTT-3.3.4-4]. It aliases a buffer inside Matches: valid until the
	// next Match with the same Matches.
	SubscriptionIDs []uint32
	// ShareName is set when this copy goes to the subscriber as the chosen
	// member of a share group. A client with a non-shared and a shared
	// subscription can get two copies (v5 §4.8.2).
	ShareName string
}

// Matches is the reusable result of Tree.Match. Keep one per goroutine
// (per connection reader, or in a sync.Pool): after a few calls its
// buffers have grown to the working size and Match allocates nothing.
type Matches struct {
	// Ready, if set, says whether a share-group member can take a message
	// now (connected, outbound queue not full). Match skips members that
	// are not ready when choosing the receiver of a share group; if no
	// member is ready the round-robin choice is used anyway, so the
	// message is queued (and counted by the server) rather than lost.
	// Ready is called under the tree's read lock: it must not call back
	// into the tree.
	Ready func(SubscriberID) bool

	// Deliveries is the result: one entry per subscriber for its
	// non-shared subscriptions, in no particular order, then one entry
	// per share group that matched.
	Deliveries []Delivery

	hits   []hit       // matching non-shared subscriptions
	shared []sharedHit // chosen share-group members
	ids    []uint32
	idEnd  []int32 // per delivery: id count, then end offset in ids
	seen   seenTable
	nodes  int // nodes that contributed non-shared hits
}

// hit is one matching non-shared subscription, before aggregation.
type hit struct {
	client   SubscriberID
	opts     Options
	delivery int32 // index into Deliveries, set by aggregate
}

// sharedHit is the member chosen by one matching share group.
type sharedHit struct {
	entry
	share string
}

// Match fills out with the deliveries for a PUBLISH to topic by the client
// publisher. topic must be a valid topic name (see ValidateTopicName).
// Match does not allocate once out has grown to the working size.
func (t *Tree) Match(topic []byte, publisher SubscriberID, out *Matches) {
	out.hits = out.hits[:0]
	out.shared = out.shared[:0]
	out.Deliveries = out.Deliveries[:0]
	out.ids = out.ids[:0]
	out.nodes = 0
	if len(topic) == 0 {
		return
	}
	// [MQTT-4.7.2-1] a filter starting with a wildcard does not match a
	// topic name starting with '$'.
	dollar := topic[0] == '$'

	t.mu.RLock()
	out.walk(t.root, topic, 0, publisher, dollar)
	t.mu.RUnlock()

	out.aggregate()
}

// walk matches the topic levels from pos on against the subtree of n.
// pos > len(topic) means all levels are consumed. noWild suppresses the
// '+' and '#' children of n (the '$' rule at the first level).
func (m *Matches) walk(n *node, topic []byte, pos int, pub SubscriberID, noWild bool) {
	// [MQTT-4.7.1-2] '#' matches the parent level and any number of
	// child levels: "sport/#" matches "sport" and "sport/a/b".
	if n.hash != nil && !noWild {
		m.collect(n.hash, pub)
	}
	if pos > len(topic) {
		m.collect(n, pub)
		return
	}
	end := bytes.IndexByte(topic[pos:], '/')
	if end < 0 {
		end = len(topic)
	} else {
		end += pos
	}
	// string(level) in a map index does not allocate.
	if c := n.children[string(topic[pos:end])]; c != nil {
		m.walk(c, topic, end+1, pub, false)
	}
	// [MQTT-4.7.1-3] '+' matches exactly one level, empty levels too.
	if n.plus != nil && !noWild {
		m.walk(n.plus, topic, end+1, pub, false)
	}
}

// collect records the subscriptions on a matching node.
func (m *Matches) collect(n *node, pub SubscriberID) {
	before := len(m.hits)
	for i := range n.subs.entries {
		e := &n.subs.entries[i]
		// [MQTT-3.8.3-3] No Local: not to the publishing client.
		if e.opts.NoLocal && e.client == pub {
			continue
		}
		m.hits = append(m.hits, hit{client: e.client, opts: e.opts})
	}
	if len(m.hits) > before {
		m.nodes++
	}
	for _, g := range n.groups {
		if e, ok := g.pick(m.Ready); ok {
			m.shared = append(m.shared, sharedHit{entry: e, share: g.name})
		}
	}
}

// pick chooses the next member of the group, round robin, preferring
// members that are ready. A message goes to one member only (v5 §4.8.2).
func (g *shareGroup) pick(ready func(SubscriberID) bool) (entry, bool) {
	n := uint64(len(g.members.entries))
	if n == 0 {
		return entry{}, false
	}
	start := (g.next.Add(1) - 1) % n
	if ready != nil {
		for k := uint64(0); k < n; k++ {
			i := (start + k) % n
			if ready(g.members.entries[i].client) {
				if k > 0 {
					// Continue the rotation after the member taken.
					g.next.Add(k)
				}
				return g.members.entries[i], true
			}
		}
	}
	return g.members.entries[start], true
}

// aggregate merges hits of the same client into one Delivery (max QoS,
// union of subscription ids) and appends the shared deliveries. It runs
// in time linear in the hits: a client seen on several matching filters
// is found again through the seen table, not by sorting.
func (m *Matches) aggregate() {
	merge := m.nodes > 1 // one node holds at most one entry per client
	if merge {
		m.seen.reset(len(m.hits))
	}
	// Pass 1: one Delivery per client; count its identifiers.
	m.idEnd = m.idEnd[:0]
	total := 0
	for i := range m.hits {
		h := &m.hits[i]
		d := -1
		if merge {
			d = m.seen.lookup(h.client, int32(len(m.Deliveries)))
		}
		if d < 0 {
			d = len(m.Deliveries)
			m.Deliveries = append(m.Deliveries, Delivery{Subscriber: h.client, QoS: h.opts.QoS, RetainAsPublished: h.opts.RetainAsPublished})
			m.idEnd = append(m.idEnd, 0)
		} else {
			dv := &m.Deliveries[d]
			dv.QoS = max(dv.QoS, h.opts.QoS) // [MQTT-3.3.4-2]
			dv.RetainAsPublished = dv.RetainAsPublished || h.opts.RetainAsPublished
		}
		h.delivery = int32(d)
		if h.opts.SubscriptionID != 0 {
			m.idEnd[d]++
			total++
		}
	}
	// Size the id buffer once, so the slices handed out stay valid.
	total += len(m.shared)
	if cap(m.ids) < total {
		m.ids = make([]uint32, 0, total+total/2)
	}
	m.ids = m.ids[:total]
	// Pass 2: lay the identifiers of each delivery side by side
	// [MQTT-3.3.4-3], [MQTT-3.3.4-4]. idEnd turns from counts into the
	// next free position of each delivery, then into its end.
	off := int32(0)
	for d, n := range m.idEnd {
		m.idEnd[d] = off
		off += n
	}
	for i := range m.hits {
		h := &m.hits[i]
		if h.opts.SubscriptionID != 0 {
			m.ids[m.idEnd[h.delivery]] = h.opts.SubscriptionID
			m.idEnd[h.delivery]++
		}
	}
	start := int32(0)
	for d, end := range m.idEnd {
		if end > start {
			m.Deliveries[d].SubscriptionIDs = m.ids[start:end:end]
		}
		start = end
	}
	for _, h := range m.shared {
		d := Delivery{Subscriber: h.client, QoS: h.opts.QoS, RetainAsPublished: h.opts.RetainAsPublished, ShareName: h.share}
		if id := h.opts.SubscriptionID; id != 0 {
			// v5 §3.3.4: a shared copy carries only the identifier
			// of the receiving member's subscription.
			m.ids[off] = id
			d.SubscriptionIDs = m.ids[off : off+1 : off+1]
			off++
		}
		m.Deliveries = append(m.Deliveries, d)
	}
}

// seenTable maps a client to its Delivery index during one aggregation:
// open addressing with linear probing. Slots carry the generation that
// wrote them, so resetting is a counter increment, not a clear; the table
// only allocates when a match has more hits than any before.
type seenTable struct {
	slots []seenSlot
	gen   uint32
	shift uint8
}

type seenSlot struct {
	gen      uint32
	delivery int32
	client   SubscriberID
}

// reset prepares the table for n keys.
func (s *seenTable) reset(n int) {
	if len(s.slots) < 2*n || len(s.slots) == 0 {
		size := 16
		for size < 2*n {
			size <<= 1
		}
		s.slots = make([]seenSlot, size)
		s.shift = uint8(64 - bits.TrailingZeros(uint(size)))
		s.gen = 0
	}
	s.gen++
	if s.gen == 0 { // wrapped: old stamps could collide
		clear(s.slots)
		s.gen = 1
	}
}

// lookup returns the delivery index of c, or records next for c and
// returns -1.
func (s *seenTable) lookup(c SubscriberID, next int32) int {
	mask := len(s.slots) - 1
	i := int((uint64(c) * 0x9E3779B97F4A7C15) >> s.shift)
	for {
		sl := &s.slots[i]
		if sl.gen != s.gen {
			*sl = seenSlot{gen: s.gen, delivery: next, client: c}
			return -1
		}
		if sl.client == c {
			return int(sl.delivery)
		}
		i = (i + 1) & mask
	}
}
