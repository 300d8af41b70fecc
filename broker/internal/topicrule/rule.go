// Package topicrule holds a tenant's topic rules (the API's
// /v1/tenants/{tid}/topics, table topic_rules) as a node enforces them:
// which rule governs a topic, and that rule's size limit, retained flag,
// retention and message rate.
//
// # Which rule governs a topic
//
// At most one rule applies to a message: of the rules whose filters match
// its topic (MQTT matching, topic.MatchFilter), the most specific. Filters
// are ordered once, independently of any topic, by these keys in turn:
//
//  1. more literal levels (levels that are neither '+' nor '#') first;
//  2. a filter without '#' before one with '#';
//  3. more levels first;
//  4. level by level from the left, a literal level before '+' at the
//     first level where one filter has a literal and the other '+'.
//
// Two different filters that both match one topic never tie on all four,
// so the choice is total and does not depend on the order rules were
// created in. An exact topic (no wildcard) beats every wildcard filter
// matching it: none has more literal levels, and "a/b/#", the one that
// may have as many, loses on '#'. Examples, for the topic a/b/c:
//
//	a/b/c   beats  a/b/#   (3 literal levels against 2)
//	a/+/c   beats  a/b/#   (2 literal levels each; no '#' first)
//	a/b/+   beats  a/+/c   (same counts; 'b' beats '+' at level 2)
//	a/+/#   beats  a/#     (1 literal level each, '#' each; more levels)
//	+/+/+   beats  #       (3 levels against 1)
//
// # Cost
//
// A Set is immutable once built (its rate buckets aside, which lock
// themselves), read through an atomic pointer by the shard: a tenant
// without rules pays one pointer load per message. Match walks the rules
// in precedence order and stops at the first match; it does not allocate.
package topicrule

import (
	"slices"
	"strings"
	"time"

	"berth.dev/broker/internal/quota"
	"berth.dev/broker/internal/topic"
)

// Rule is one topic rule. The zero value of a limit means none.
type Rule struct {
	ID     string
	Filter string
	// Retention is how long a message on a matching topic stays
	// available to offline sessions and replay, when HasRetention is
	// set; otherwise the tenant's retention quota alone bounds it.
	Retention    time.Duration
	HasRetention bool
	// RetainedAllowed false refuses the RETAIN flag on matching topics.
	RetainedAllowed bool
	// MaxMessageSize bounds a matching message's payload in bytes, below
	// the tenant's max_message_size quota; 0 means none.
	MaxMessageSize int64
	// MaxMsgsPerSec is the rate of messages on all matching topics
	// together, for the tenant on this node; 0 means none.
	MaxMsgsPerSec int64

	rate   *quota.Bucket // nil without MaxMsgsPerSec
	prefix string        // the filter's literal levels before its first wildcard, a quick reject
}

// AllowMessage takes one message from the rule's rate at now and reports
// whether it was within the rate (always, without one).
func (r *Rule) AllowMessage(now time.Time) bool {
	return r.rate == nil || r.rate.Take(now, 1)
}

// ReserveMessage counts one message against the rule's rate even when
// over it and returns how long its sender should pause so that the rate
// holds: the way to slow down an MQTT 3.1.1 publisher, which cannot be
// refused. At most one second's messages of debt are kept; beyond that
// the pause is a second.
func (r *Rule) ReserveMessage(now time.Time) time.Duration {
	if r.rate == nil {
		return 0
	}
	d, ok := r.rate.Reserve(now, 1)
	if !ok {
		return time.Second
	}
	return d
}

// Expired reports whether a message created at created (Unix
// nanoseconds) is past the rule's retention at now.
func (r *Rule) Expired(created, now int64) bool {
	return r.HasRetention && now-created > int64(r.Retention)
}

// Set is a tenant's rules, most specific first. A nil *Set has no rules.
type Set struct {
	rules     []Rule
	retention bool // some rule has a retention
}

// NewSet orders rules by precedence (see the package comment). A rule
// keeps the rate bucket (and the tokens it has spent) of the rule with
// the same ID in prev, so a reload does not refill it. Rules whose filter
// is not a valid filter, or is a shared one, match nothing and are left
// out; skipped lists them. NewSet returns nil when no rule is left.
func NewSet(rules []Rule, prev *Set) (s *Set, skipped []Rule) {
	out := make([]Rule, 0, len(rules))
	for _, r := range rules {
		if f, err := topic.ParseFilter(r.Filter, 0); err != nil || f.Shared() {
			skipped = append(skipped, r)
			continue
		}
		r.rate, r.prefix = nil, literalPrefix(r.Filter)
		if r.MaxMsgsPerSec > 0 {
			rate := float64(r.MaxMsgsPerSec)
			if old := prev.byID(r.ID); old != nil && old.rate != nil {
				r.rate = old.rate
				r.rate.SetRate(rate, rate)
			} else {
				r.rate = quota.NewBucket(rate, rate)
			}
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return nil, skipped
	}
	slices.SortStableFunc(out, func(a, b Rule) int { return compare(a.Filter, b.Filter) })
	s = &Set{rules: out}
	for i := range out {
		s.retention = s.retention || out[i].HasRetention
	}
	return s, skipped
}

func (s *Set) byID(id string) *Rule {
	if s == nil {
		return nil
	}
	for i := range s.rules {
		if s.rules[i].ID == id {
			return &s.rules[i]
		}
	}
	return nil
}

// Match returns the rule governing the topic name, nil when none matches.
// name must be a valid topic name. It does not allocate.
func (s *Set) Match(name []byte) *Rule {
	if s == nil {
		return nil
	}
	for i := range s.rules {
		r := &s.rules[i]
		if len(name) >= len(r.prefix) && string(name[:len(r.prefix)]) == r.prefix && topic.MatchFilter(r.Filter, name) {
			return r
		}
	}
	return nil
}

// literalPrefix is what every topic name matching filter starts with: its
// levels before the first wildcard, without the '/' that follows them
// ("a/b/#" matches "a/b").
func literalPrefix(filter string) string {
	end := len(filter)
	if i := strings.IndexAny(filter, "+#"); i >= 0 {
		end = i
	}
	return strings.TrimSuffix(filter[:end], "/")
}

// equal reports whether s and o hold the same rules (rates aside).
func (s *Set) equal(o *Set) bool {
	if s.Len() != o.Len() {
		return false
	}
	for i := range s.Len() {
		a, b := s.rules[i], o.rules[i]
		a.rate, b.rate = nil, nil
		if a != b {
			return false
		}
	}
	return true
}

// HasRetention reports whether some rule sets a retention, so that
// readers of old messages need to ask Match at all.
func (s *Set) HasRetention() bool { return s != nil && s.retention }

// Len is the number of rules.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.rules)
}

// Rules returns the rules in precedence order, most specific first.
func (s *Set) Rules() []Rule {
	if s == nil {
		return nil
	}
	return slices.Clone(s.rules)
}

// shape is what precedence compares of a filter.
type shape struct {
	literals, levels int
	hash             bool
}

func shapeOf(filter string) shape {
	var sh shape
	for level := range strings.SplitSeq(filter, "/") {
		sh.levels++
		switch level {
		case "#":
			sh.hash = true
		case "+":
		default:
			sh.literals++
		}
	}
	return sh
}

// compare orders filter a before b (negative) when a is the more specific
// (see the package comment); 0 only for equal filters.
func compare(a, b string) int {
	sa, sb := shapeOf(a), shapeOf(b)
	switch {
	case sa.literals != sb.literals:
		return sb.literals - sa.literals
	case sa.hash != sb.hash:
		if sa.hash {
			return 1
		}
		return -1
	case sa.levels != sb.levels:
		return sb.levels - sa.levels
	}
	la, lb := strings.Split(a, "/"), strings.Split(b, "/")
	for i := range la {
		wa, wb := la[i] == "+" || la[i] == "#", lb[i] == "+" || lb[i] == "#"
		if wa != wb {
			if wa {
				return 1
			}
			return -1
		}
	}
	// Literals at the same levels: no topic matches both, so any fixed
	// order will do.
	return strings.Compare(a, b)
}
