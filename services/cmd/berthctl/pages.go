package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"

	"berth.dev/services/apiclient"
)

// defaultListLimit is how many items a listing shows without --limit or
// --all: one page of the API's default size.
const defaultListLimit = 50

// maxPage is the largest page berthctl asks for: the API's bound for the
// lists keyed by time (sessions take up to 1000).
const maxPage = 200

// withPages adds --limit and --all to a listing.
func (f *flags) withPages() *flags {
	f.limit = f.Int("limit", defaultListLimit, "show at most this many items, following the API's pages")
	f.all = f.Bool("all", false, "show every item, following the API's pages to the end")
	return f
}

// listPages fetches a listing page by page (?limit, ?cursor → next_cursor)
// until --limit items or, with --all, the end. Under --json it prints one
// document in the API's list form, {"items": [...], "next_cursor": ...},
// next_cursor null when nothing is left, and returns printed true.
// Otherwise it decodes the items into T and, when more are left, says so
// on stderr.
func listPages[T any](ctx context.Context, e *env, f *flags, s *session, r apiclient.Route, args []string, q url.Values) (items []T, printed bool, err error) {
	limit := defaultListLimit
	if f.limit != nil {
		limit = *f.limit
	}
	all := f.all != nil && *f.all
	if !all && limit < 1 {
		return nil, false, usagef("%s: --limit must be at least 1 (or give --all)", f.Name())
	}
	raw, next, err := fetchPages(ctx, s.api, r, args, q, limit, all)
	if err != nil {
		return nil, false, err
	}
	if f.json != nil && *f.json {
		doc, err := json.Marshal(apiclient.List[json.RawMessage]{Items: raw, NextCursor: next})
		if err != nil {
			return nil, false, err
		}
		return nil, true, printJSON(e.stdout, doc)
	}
	items, err = decodeItems[T](raw)
	if err == nil && next != nil {
		fmt.Fprintf(e.stderr, "(%d shown; more with --limit N or --all)\n", len(items))
	}
	return items, false, err
}

// allItems is every item of a listing, all its pages.
func allItems[T any](ctx context.Context, api *apiclient.Client, r apiclient.Route, args []string) ([]T, error) {
	raw, _, err := fetchPages(ctx, api, r, args, nil, 0, true)
	if err != nil {
		return nil, err
	}
	return decodeItems[T](raw)
}

// fetchPages follows a listing's cursor until it has limit items or, when
// all, to the end; next is the cursor of what is left (nil: nothing).
func fetchPages(ctx context.Context, api *apiclient.Client, r apiclient.Route, args []string, q url.Values, limit int, all bool) (raw []json.RawMessage, next *string, err error) {
	q2 := url.Values{}
	for k, v := range q {
		q2[k] = v
	}
	raw = []json.RawMessage{}
	for {
		n := maxPage
		if !all {
			n = min(maxPage, limit-len(raw))
		}
		q2.Set("limit", fmt.Sprint(n))
		var page apiclient.List[json.RawMessage]
		if err := api.Call(ctx, r, args, q2, nil, &page); err != nil {
			return nil, nil, err
		}
		raw = append(raw, page.Items...)
		next = page.NextCursor
		if next == nil || (!all && len(raw) >= limit) {
			return raw, next, nil
		}
		if len(page.Items) == 0 {
			return nil, nil, fmt.Errorf("%s %s: the API sent an empty page with a next cursor", r.Method, r.Path)
		}
		q2.Set("cursor", *next)
	}
}

func decodeItems[T any](raw []json.RawMessage) ([]T, error) {
	items := make([]T, len(raw))
	for i, m := range raw {
		if err := json.Unmarshal(m, &items[i]); err != nil {
			return nil, err
		}
	}
	return items, nil
}

// tenantList is listPages on the resolved tenant's route r.
func tenantList[T any](ctx context.Context, e *env, f *flags, r apiclient.Route, q url.Values) ([]T, bool, error) {
	s, err := open(e, f)
	if err != nil {
		return nil, false, err
	}
	t, err := s.tenant(ctx, e, f)
	if err != nil {
		return nil, false, err
	}
	return listPages[T](ctx, e, f, s, r, []string{t.ID}, q)
}
