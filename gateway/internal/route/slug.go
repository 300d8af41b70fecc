package route

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// maxAbsent bounds the cache of slugs found not to exist, so a flood of
// queries for random names cannot grow it without end.
const maxAbsent = 1 << 16

// slugCache maps tenant slugs to tenant ids, under Table.mu. A known slug
// is kept until the route it leads to says otherwise (LookupSlug checks
// every answer's Slug, so a rename or a deletion is noticed through the
// route's own invalidation); a slug found not to exist is kept for
// Options.NegativeTTL, or until the next berth_placement NOTIFY (the API
// announces a tenant created with a node there), which drops every such
// entry: a tenant created right after a probe of its name is found.
type slugCache struct {
	ids     map[string]string    // slug -> tenant id
	absent  map[string]time.Time // slug -> when the answer expires
	sweptAt time.Time
	// absentGen is bumped when absent is emptied: a query that started
	// before does not record its "no such slug".
	absentGen uint64
}

func newSlugCache() slugCache {
	return slugCache{ids: map[string]string{}, absent: map[string]time.Time{}}
}

func (c *slugCache) clear() {
	clear(c.ids)
	c.dropAbsent()
}

// dropAbsent forgets every slug found not to exist.
func (c *slugCache) dropAbsent() {
	clear(c.absent)
	c.absentGen++
}

// setAbsent records that slug does not exist until expires. When the cache
// is full it drops expired entries (at most once a second) and otherwise
// leaves slug out.
func (c *slugCache) setAbsent(slug string, now, expires time.Time) {
	if len(c.absent) >= maxAbsent && now.Sub(c.sweptAt) >= time.Second {
		c.sweptAt = now
		for s, exp := range c.absent {
			if !now.Before(exp) {
				delete(c.absent, s)
			}
		}
	}
	if len(c.absent) < maxAbsent {
		c.absent[slug] = expires
	}
}

// LookupSlug returns the route of the tenant whose slug is slug (the host
// label of its endpoint <slug>.<domain>; package tenantdns), with the
// errors of Lookup. The slug's tenant id is cached; the route comes from
// Lookup's cache, so a hot tenant costs no query. When the route names
// another slug (the tenant was renamed) or no tenant (deleted), the slug
// and the route are both read again before the answer is given.
func (t *Table) LookupSlug(ctx context.Context, slug string) (Route, error) {
	id, err := t.slugID(ctx, slug)
	if err != nil {
		return Route{}, err
	}
	r, err := t.Lookup(ctx, id)
	if ok, err := slugAnswer(r, err, slug); ok || err != nil {
		return r, err
	}
	// A stale mapping, or a route whose NOTIFY has not arrived yet.
	t.mu.Lock()
	if t.slugs.ids[slug] == id {
		delete(t.slugs.ids, slug)
	}
	t.mu.Unlock()
	if id, err = t.slugID(ctx, slug); err != nil {
		return Route{}, err
	}
	r, err = t.Refresh(ctx, id)
	if ok, err := slugAnswer(r, err, slug); ok || err != nil {
		return r, err
	}
	return Route{}, ErrNoTenant // renamed again between the two reads
}

// CachedSlug is LookupSlug's answer when it needs no query: ok is false
// when the slug's tenant id or its route is not cached (or the route
// names another slug), and LookupSlug would read Postgres. It never
// blocks on a query in flight.
func (t *Table) CachedSlug(slug string) (r Route, err error, ok bool) {
	now := t.opt.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if exp, absent := t.slugs.absent[slug]; absent && now.Before(exp) {
		return Route{}, ErrNoTenant, true
	}
	id, known := t.slugs.ids[slug]
	if !known {
		return Route{}, nil, false
	}
	e, cached := t.cache[id]
	if !cached || !now.Before(e.expires) {
		return Route{}, nil, false
	}
	if ok, err := slugAnswer(e.r, e.err, slug); ok {
		return e.r, err, true
	}
	return Route{}, nil, false
}

// slugAnswer tells whether Lookup's answer (r, err) is slug's: ok when it
// is (err then nil or ErrNotPlaced), a database error to return, or
// neither when the tenant is gone or has another slug now.
func slugAnswer(r Route, err error, slug string) (bool, error) {
	switch {
	case err == nil || errors.Is(err, ErrNotPlaced):
		if r.Slug == slug {
			return true, err
		}
		return false, nil
	case errors.Is(err, ErrNoTenant):
		return false, nil
	default:
		return false, err
	}
}

// slugID returns the id of the tenant named slug, from the cache or
// Postgres; ErrNoTenant when there is none.
func (t *Table) slugID(ctx context.Context, slug string) (string, error) {
	now := t.opt.Now()
	t.mu.Lock()
	id, known := t.slugs.ids[slug]
	exp, absent := t.slugs.absent[slug]
	gen, absentGen := t.gen, t.slugs.absentGen
	t.mu.Unlock()
	switch {
	case known:
		return id, nil
	case absent && now.Before(exp):
		return "", ErrNoTenant
	}
	err := t.pool.QueryRow(ctx, `SELECT id FROM tenants WHERE slug = $1`, slug).Scan(&id)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("route: lookup slug %q: %w", slug, err) // not cached
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if gen != t.gen { // the listener reconnected meanwhile: do not cache
		if err != nil {
			return "", ErrNoTenant
		}
		return id, nil
	}
	if err != nil {
		if absentGen == t.slugs.absentGen { // no tenant created meanwhile
			t.slugs.setAbsent(slug, now, now.Add(t.opt.NegativeTTL))
		}
		return "", ErrNoTenant
	}
	delete(t.slugs.absent, slug)
	t.slugs.ids[slug] = id
	return id, nil
}
