package tenantdns

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"berth.dev/gateway/internal/route"
)

// maxLookups bounds the Postgres lookups that DNS queries run at once.
// The gateway's pool also serves devices' CONNECTs (route and credential
// lookups): a flood of queries for random names (each one unknown, so
// each one a query) takes at most this many of its connections, and the
// queries beyond wait for a slot (until lookupTimeout: SERVFAIL). Names
// whose answer is cached (a tenant's route, or a slug found absent) take
// no slot and never wait (Responder.AnswerCached).
const maxLookups = 4

// errNoSlot: a lookup found no free slot within its deadline.
var errNoSlot = errors.New("tenantdns: no lookup slot free (too many unknown names at once)")

// lookups runs the responder's route lookups: from the route table's
// cache when it has the answer, else through one of maxLookups slots,
// one lookup per name at a time (queries for a name being looked up wait
// for that lookup's answer).
type lookups struct {
	routes Routes
	slots  chan struct{}

	mu    sync.Mutex
	calls map[string]*lookupCall // by slug: the lookups under way
}

// lookupCall is one lookup under way; done is closed when r and err are
// set.
type lookupCall struct {
	done chan struct{}
	r    route.Route
	err  error
}

func newLookups(routes Routes) *lookups {
	return &lookups{routes: routes, slots: make(chan struct{}, maxLookups), calls: map[string]*lookupCall{}}
}

// cached is the route table's cached answer for slug; ok false when there
// is none.
func (l *lookups) cached(slug string) (route.Route, error, bool) { return l.routes.CachedSlug(slug) }

// lookup returns slug's route, joining a lookup of slug under way or
// running one in a slot; ctx bounds the wait and the lookup.
func (l *lookups) lookup(ctx context.Context, slug string) (route.Route, error) {
	l.mu.Lock()
	c, joined := l.calls[slug]
	if !joined {
		c = &lookupCall{done: make(chan struct{})}
		l.calls[slug] = c
	}
	l.mu.Unlock()
	if joined {
		select {
		case <-c.done:
			return c.r, c.err
		case <-ctx.Done():
			return route.Route{}, fmt.Errorf("tenantdns: waiting for the lookup of %q: %w", slug, ctx.Err())
		}
	}
	defer func() {
		l.mu.Lock()
		delete(l.calls, slug)
		l.mu.Unlock()
		close(c.done)
	}()
	select {
	case l.slots <- struct{}{}:
		c.r, c.err = l.routes.LookupSlug(ctx, slug)
		<-l.slots
	case <-ctx.Done():
		c.err = fmt.Errorf("%w: %w", errNoSlot, ctx.Err())
	}
	return c.r, c.err
}

// underWay is the number of lookups under way or waiting for a slot.
func (l *lookups) underWay() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.calls)
}
