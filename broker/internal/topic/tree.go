package topic

import (
	"sync"
	"sync/atomic"
)

// SubscriberID names one client session to the tree. The server chooses
// the values (for example an index into its session table); the tree only
// compares them. A publish that does not come from a client (HTTP publish,
// will messages of vanished sessions) passes an ID no subscriber uses.
type SubscriberID uint64

// RetainHandling is the SUBSCRIBE option that says whether retained
// messages are sent when the subscription is made [MQTT-3.3.1-9..11].
type RetainHandling byte

// Retain Handling values, as encoded in bits 4-5 of the options byte.
const (
	SendRetained      RetainHandling = 0 // send on every subscribe
	SendRetainedIfNew RetainHandling = 1 // send only if the subscription is new
	NoRetained        RetainHandling = 2 // never send at subscribe time
)

// Options are the per-subscription options of SUBSCRIBE (v5 §3.8.3.1; a
// v3.1.1 client sets only QoS).
type Options struct {
	QoS               byte           // maximum QoS granted, 0..2
	NoLocal           bool           // [MQTT-3.8.3-3]
	RetainAsPublished bool           // keep the RETAIN flag when forwarding
	RetainHandling    RetainHandling // see SendRetainedOnSubscribe
	// SubscriptionID is the v5 Subscription Identifier (1..268,435,455),
	// 0 when the SUBSCRIBE carried none.
	SubscriptionID uint32
}

// SendRetainedOnSubscribe reports whether the server sends matching
// retained messages after a SUBSCRIBE with these options, given whether
// the subscription already existed (Tree.Subscribe reports it) and whether
// the filter is shared. [MQTT-3.3.1-9] 0: always; [MQTT-3.3.1-10] 1: only if
// the subscription is new; [MQTT-3.3.1-11] 2: never. For a shared
// subscription retained messages are never sent at subscribe time: v5
// §3.3.1.3 sends them only when a new Non-shared Subscription is made.
func (o Options) SendRetainedOnSubscribe(existed, shared bool) bool {
	if shared {
		return false
	}
	switch o.RetainHandling {
	case SendRetained:
		return true
	case SendRetainedIfNew:
		return !existed
	default:
		return false
	}
}

// Subscription is one stored subscription, as listed by Subscriptions.
type Subscription struct {
	Client  SubscriberID
	Filter  Filter
	Options Options
}

// Config sets the limits of a Tree.
type Config struct {
	// MaxLevels bounds the levels of a filter, and so the depth of the
	// tree and of Match's recursion; <= 0 means DefaultMaxLevels. Topic
	// names are checked by the server with ValidateTopicName.
	MaxLevels int
}

// Tree is the subscription index of one tenant. The zero value is not
// usable; call New. All methods are safe for concurrent use: Match takes a
// read lock, the mutating methods a write lock (see the package comment).
type Tree struct {
	maxLevels int

	mu      sync.RWMutex
	root    *node
	clients map[SubscriberID]map[string]Filter // client -> raw filter -> parsed
	count   int                                // total subscriptions
}

// node is one filter level. The path from the root to a node spells a
// filter; subscriptions on that exact filter hang on the node.
type node struct {
	parent   *node
	level    string           // key in parent (children, or "+" / "#")
	children map[string]*node // exact levels; never holds "+" or "#"
	plus     *node            // the '+' child
	hash     *node            // the '#' child
	subs     subList          // non-shared subscriptions on this filter
	groups   []*shareGroup    // shared subscriptions on this filter, by name
}

// shareGroup is one $share/{name}/{filter} group. next is the round-robin
// cursor; Match advances it under the read lock, hence atomic.
type shareGroup struct {
	name    string
	members subList
	next    atomic.Uint64
}

// entry is one subscription on a node.
type entry struct {
	client SubscriberID
	opts   Options
}

// New returns an empty tree.
func New(cfg Config) *Tree {
	if cfg.MaxLevels <= 0 {
		cfg.MaxLevels = DefaultMaxLevels
	}
	return &Tree{
		maxLevels: cfg.MaxLevels,
		root:      &node{},
		clients:   make(map[SubscriberID]map[string]Filter),
	}
}

// Subscribe adds or replaces the subscription of client to filter (the raw
// SUBSCRIBE string, possibly $share/...). It reports whether the client
// already had a subscription to that exact filter, which is then replaced,
// options included [MQTT-3.8.4-3]; the server uses existed for Retain
// Handling 1 (see Options.SendRetainedOnSubscribe). The error is a
// validation error from ParseFilter or ErrSharedNoLocal.
func (t *Tree) Subscribe(client SubscriberID, filter string, opts Options) (existed bool, err error) {
	f, err := ParseFilter(filter, t.maxLevels)
	if err != nil {
		return false, err
	}
	if f.Shared() && opts.NoLocal {
		return false, ErrSharedNoLocal // [MQTT-3.8.3-4]
	}
	e := entry{client: client, opts: opts}

	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.root
	forEachLevel(f.Path, func(level string) {
		n = n.child(level)
	})
	if f.Shared() {
		g := n.group(f.ShareName)
		if g == nil {
			g = &shareGroup{name: f.ShareName}
			n.groups = append(n.groups, g)
		}
		existed = g.members.put(e)
	} else {
		existed = n.subs.put(e)
	}
	if !existed {
		cs := t.clients[client]
		if cs == nil {
			cs = make(map[string]Filter)
			t.clients[client] = cs
		}
		cs[f.Raw] = f
		t.count++
	}
	return existed, nil
}

// Unsubscribe removes the subscription of client to filter (compared
// character by character with the subscribed filter [MQTT-3.10.4-1]) and
// reports whether it existed. A client that leaves a share group stops
// receiving its messages at once.
func (t *Tree) Unsubscribe(client SubscriberID, filter string) (existed bool, err error) {
	f, err := ParseFilter(filter, t.maxLevels)
	if err != nil {
		return false, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.unsubscribeLocked(client, f), nil
}

// RemoveClient removes every subscription of client (a session that ended
// or was taken over without state) and returns how many there were.
func (t *Tree) RemoveClient(client SubscriberID) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	cs := t.clients[client]
	n := 0
	for _, f := range cs {
		if t.unsubscribeLocked(client, f) {
			n++
		}
	}
	return n
}

// Count returns how many subscriptions client holds, for the
// subscriptions-per-client quota.
func (t *Tree) Count(client SubscriberID) int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.clients[client])
}

// Len returns the number of subscriptions in the tree.
func (t *Tree) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.count
}

// Subscriptions appends the subscriptions of client to buf and returns it,
// in no particular order (session persistence, the admin API).
func (t *Tree) Subscriptions(client SubscriberID, buf []Subscription) []Subscription {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, f := range t.clients[client] {
		n := t.findLocked(f.Path)
		if n == nil {
			continue
		}
		list := &n.subs
		if f.Shared() {
			g := n.group(f.ShareName)
			if g == nil {
				continue
			}
			list = &g.members
		}
		if i := list.find(client); i >= 0 {
			buf = append(buf, Subscription{Client: client, Filter: f, Options: list.entries[i].opts})
		}
	}
	return buf
}

// unsubscribeLocked removes one subscription and prunes empty nodes.
func (t *Tree) unsubscribeLocked(client SubscriberID, f Filter) bool {
	n := t.findLocked(f.Path)
	if n == nil {
		return false
	}
	if f.Shared() {
		gi := -1
		for i, g := range n.groups {
			if g.name == f.ShareName {
				gi = i
				break
			}
		}
		if gi < 0 || !n.groups[gi].members.remove(client) {
			return false
		}
		if n.groups[gi].members.len() == 0 {
			last := len(n.groups) - 1
			n.groups[gi] = n.groups[last]
			n.groups[last] = nil
			n.groups = n.groups[:last]
		}
	} else if !n.subs.remove(client) {
		return false
	}
	t.count--
	if cs := t.clients[client]; cs != nil {
		delete(cs, f.Raw)
		if len(cs) == 0 {
			delete(t.clients, client)
		}
	}
	n.prune()
	return true
}

// findLocked returns the node spelling path, or nil.
func (t *Tree) findLocked(path string) *node {
	n := t.root
	forEachLevel(path, func(level string) {
		if n == nil {
			return
		}
		switch level {
		case "+":
			n = n.plus
		case "#":
			n = n.hash
		default:
			n = n.children[level]
		}
	})
	return n
}

// child returns the child for level, creating it.
func (n *node) child(level string) *node {
	var c *node
	switch level {
	case "+":
		if n.plus == nil {
			n.plus = &node{parent: n, level: level}
		}
		return n.plus
	case "#":
		if n.hash == nil {
			n.hash = &node{parent: n, level: level}
		}
		return n.hash
	}
	if c = n.children[level]; c == nil {
		if n.children == nil {
			n.children = make(map[string]*node)
		}
		c = &node{parent: n, level: level}
		n.children[level] = c
	}
	return c
}

// group returns the share group called name, or nil.
func (n *node) group(name string) *shareGroup {
	for _, g := range n.groups {
		if g.name == name {
			return g
		}
	}
	return nil
}

func (n *node) empty() bool {
	return n.subs.len() == 0 && len(n.groups) == 0 && len(n.children) == 0 && n.plus == nil && n.hash == nil
}

// prune detaches n and then its ancestors while they hold nothing.
func (n *node) prune() {
	for n.parent != nil && n.empty() {
		p := n.parent
		switch {
		case p.plus == n:
			p.plus = nil
		case p.hash == n:
			p.hash = nil
		default:
			delete(p.children, n.level)
		}
		n.parent = nil
		n = p
	}
}

// forEachLevel calls fn with each '/'-separated level of s, empty levels
// included.
func forEachLevel(s string, fn func(level string)) {
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '/' {
			fn(s[start:i])
			start = i + 1
		}
	}
	fn(s[start:])
}

// subList is a set of entries keyed by client: a slice for iteration,
// plus an index once it grows past linear-scan size.
type subList struct {
	entries []entry
	index   map[SubscriberID]int
}

// indexAbove is the length from which a subList keeps a map index.
const indexAbove = 16

func (l *subList) len() int { return len(l.entries) }

func (l *subList) find(c SubscriberID) int {
	if l.index != nil {
		if i, ok := l.index[c]; ok {
			return i
		}
		return -1
	}
	for i := range l.entries {
		if l.entries[i].client == c {
			return i
		}
	}
	return -1
}

// put inserts or replaces e and reports whether e.client was present.
func (l *subList) put(e entry) bool {
	if i := l.find(e.client); i >= 0 {
		l.entries[i] = e
		return true
	}
	l.entries = append(l.entries, e)
	if l.index != nil {
		l.index[e.client] = len(l.entries) - 1
	} else if len(l.entries) > indexAbove {
		l.index = make(map[SubscriberID]int, len(l.entries))
		for i := range l.entries {
			l.index[l.entries[i].client] = i
		}
	}
	return false
}

// remove deletes the entry of c (swap with the last) and reports whether
// it was present.
func (l *subList) remove(c SubscriberID) bool {
	i := l.find(c)
	if i < 0 {
		return false
	}
	last := len(l.entries) - 1
	if i != last {
		l.entries[i] = l.entries[last]
		if l.index != nil {
			l.index[l.entries[i].client] = i
		}
	}
	l.entries[last] = entry{}
	l.entries = l.entries[:last]
	if l.index != nil {
		delete(l.index, c)
		if len(l.entries) <= indexAbove/2 {
			l.index = nil
		}
	}
	if len(l.entries) == 0 {
		l.entries = nil
	}
	return true
}
