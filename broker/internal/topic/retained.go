package topic

import "sync"

// Retained is the retained-message index of one tenant: topic name →
// value, where the value is whatever the server keeps for a retained
// message (a pointer to the message, or a WAL offset). It answers the
// reverse question of Tree: which stored topics match a filter.
//
// Retained is safe for concurrent use; reads share an RWMutex.
type Retained[V any] struct {
	mu    sync.RWMutex
	root  *rnode[V]
	n     int
	bytes int64
}

// rnode is one topic level; set marks a node that holds a message.
type rnode[V any] struct {
	parent   *rnode[V]
	level    string
	children map[string]*rnode[V]
	set      bool
	topic    string
	val      V
	size     int
}

// NewRetained returns an empty index.
func NewRetained[V any]() *Retained[V] {
	return &Retained[V]{root: &rnode[V]{}}
}

// Set stores v as the retained message of topic, replacing any previous
// one [MQTT-3.3.1-5], and reports whether one was replaced. size is the
// number of bytes v accounts for in Bytes (payload plus properties, as
// the quota counts them). topic must be a valid topic name; a retained
// message with an empty payload is a deletion and the caller calls Delete
// instead [MQTT-3.3.1-6].
func (r *Retained[V]) Set(topic string, v V, size int) (replaced bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.root
	forEachLevel(topic, func(level string) {
		c := n.children[level]
		if c == nil {
			if n.children == nil {
				n.children = make(map[string]*rnode[V])
			}
			c = &rnode[V]{parent: n, level: level}
			n.children[level] = c
		}
		n = c
	})
	if n.set {
		replaced = true
		r.bytes -= int64(n.size)
	} else {
		r.n++
	}
	n.set, n.topic, n.val, n.size = true, topic, v, size
	r.bytes += int64(size)
	return replaced
}

// Delete removes the retained message of topic and reports whether there
// was one.
func (r *Retained[V]) Delete(topic string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.findLocked(topic)
	if n == nil || !n.set {
		return false
	}
	var zero V
	r.n--
	r.bytes -= int64(n.size)
	n.set, n.topic, n.val, n.size = false, "", zero, 0
	for n.parent != nil && !n.set && len(n.children) == 0 {
		p := n.parent
		delete(p.children, n.level)
		n.parent = nil
		n = p
	}
	return true
}

// Get returns the retained message of topic.
func (r *Retained[V]) Get(topic string) (V, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if n := r.findLocked(topic); n != nil && n.set {
		return n.val, true
	}
	var zero V
	return zero, false
}

// Len returns the number of retained messages.
func (r *Retained[V]) Len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.n
}

// Bytes returns the sum of the sizes given to Set, for the retained
// storage quota.
func (r *Retained[V]) Bytes() int64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.bytes
}

// Match calls fn for every retained topic that filter matches, in no
// particular order, until fn returns false. filter may carry a
// $share/{name}/ prefix, which is ignored. Topics starting with '$' are
// not matched by a filter starting with a wildcard [MQTT-4.7.2-1]. fn runs
// under the read lock: it must not call Set or Delete; copy what it needs
// and send after Match returns.
func (r *Retained[V]) Match(filter string, fn func(topic string, v V) bool) error {
	f, err := ParseFilter(filter, 0)
	if err != nil {
		return err
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	r.root.walk(f.Path, 0, true, fn)
	return nil
}

// walk matches filter levels from pos on against the subtree of n and
// reports whether to continue.
func (n *rnode[V]) walk(filter string, pos int, first bool, fn func(string, V) bool) bool {
	if pos > len(filter) {
		if n.set {
			return fn(n.topic, n.val)
		}
		return true
	}
	end := pos
	for end < len(filter) && filter[end] != '/' {
		end++
	}
	switch level := filter[pos:end]; level {
	case "#":
		// [MQTT-4.7.1-2] the parent level and every level below it.
		if n.set && !fn(n.topic, n.val) {
			return false
		}
		for l, c := range n.children {
			if first && isDollar(l) {
				continue // [MQTT-4.7.2-1]
			}
			if !c.all(fn) {
				return false
			}
		}
	case "+":
		for l, c := range n.children {
			if first && isDollar(l) {
				continue // [MQTT-4.7.2-1]
			}
			if !c.walk(filter, end+1, false, fn) {
				return false
			}
		}
	default:
		if c := n.children[level]; c != nil {
			return c.walk(filter, end+1, false, fn)
		}
	}
	return true
}

// all visits n and its whole subtree.
func (n *rnode[V]) all(fn func(string, V) bool) bool {
	if n.set && !fn(n.topic, n.val) {
		return false
	}
	for _, c := range n.children {
		if !c.all(fn) {
			return false
		}
	}
	return true
}

func (r *Retained[V]) findLocked(topic string) *rnode[V] {
	n := r.root
	forEachLevel(topic, func(level string) {
		if n != nil {
			n = n.children[level]
		}
	})
	return n
}

func isDollar(level string) bool { return len(level) > 0 && level[0] == '$' }
