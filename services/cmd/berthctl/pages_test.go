package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"berth.dev/services/apiclient"
	"berth.dev/services/internal/store"
)

// TestListingsFollowPages: with more topic rules than one API page holds
// (205 > 200), --all follows next_cursor to the end (each rule once,
// next_cursor null), --limit N stops at N across pages and says more are
// left, the default shows one page of 50; --limit 0 is a usage error.
func TestListingsFollowPages(t *testing.T) {
	url, pool := apiDB(t)
	c := newCLI(t, url)
	c.ok("signup", "--email", "pages@example.com", "--password", "correct horse battery")
	st := store.New(pool)
	const n = 205
	for i := range n {
		r := store.TopicRule{ID: store.NewID(store.PrefixTopicRule), TenantID: c.config().Tenant, Filter: fmt.Sprintf("p/%03d/#", i), RetainedAllowed: true}
		if err := st.CreateTopicRule(t.Context(), &r); err != nil {
			t.Fatal(err)
		}
	}

	var all apiclient.List[apiclient.TopicRule]
	if err := json.Unmarshal([]byte(c.ok("topics", "--all", "--json")), &all); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range all.Items {
		seen[r.Filter] = true
	}
	if len(all.Items) != n || len(seen) != n || all.NextCursor != nil {
		t.Fatalf("--all --json: %d items, %d distinct, next_cursor %v; want %d, %d, null", len(all.Items), len(seen), all.NextCursor, n, n)
	}

	for _, tc := range []struct {
		args []string
		rows int
		more bool
	}{
		{[]string{"topics", "--limit", "201"}, 201, true},
		{[]string{"topics"}, defaultListLimit, true},
		{[]string{"topics", "--limit", "205"}, n, false},
		{[]string{"topics", "--all"}, n, false},
	} {
		code, out, errOut := c.run(tc.args...)
		rows := strings.Count(out, "p/")
		if code != 0 || rows != tc.rows || strings.Contains(errOut, "more with --limit") != tc.more {
			t.Errorf("%v: exit %d, %d rows, stderr %q; want %d rows, more said %v", tc.args, code, rows, errOut, tc.rows, tc.more)
		}
	}
	var some apiclient.List[apiclient.TopicRule]
	if err := json.Unmarshal([]byte(c.ok("topics", "--limit", "3", "--json")), &some); err != nil || len(some.Items) != 3 || some.NextCursor == nil {
		t.Fatalf("--limit 3 --json: %d items, next_cursor %v, %v; want 3 and a cursor", len(some.Items), some.NextCursor, err)
	}
	if code, _, _ := c.run("topics", "--limit", "0"); code != exitUsage {
		t.Fatalf("--limit 0: exit %d, want 2", code)
	}
}
