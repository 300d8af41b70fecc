package httpapi_test

import (
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"berth.dev/services/internal/httpapi"
)

// internalWords matches what a user must never read in a problem: a Go
// error chain's "pkg: " prefix for any package of the repository (as the
// start of the text or after ": " or "(" or a quote), and the vocabulary
// of the parts under the API (SQL, pgx, encoding/json, the runtime).
func internalWords(t *testing.T) *regexp.Regexp {
	t.Helper()
	root := filepath.Join("..", "..", "..") // services/internal/httpapi → the repository
	names := map[string]bool{}
	for _, mod := range []string{"services", "broker", "gateway", "billing", "quotas", "testenv", "migrations"} {
		err := filepath.WalkDir(filepath.Join(root, mod), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			if !d.IsDir() && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
				names[filepath.Base(filepath.Dir(p))] = true
			}
			return nil
		})
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	if len(names) < 20 || !names["store"] || !names["shard"] || !names["httpapi"] {
		t.Fatalf("found only these packages: %v", names)
	}
	for _, extra := range []string{"pgx", "pgconn", "pgxpool", "sql", "json", "strconv", "base64", "http", "net", "redis", "runtime"} {
		names[extra] = true
	}
	list := make([]string, 0, len(names))
	for n := range names {
		list = append(list, regexp.QuoteMeta(n))
	}
	sort.Strings(list)
	return regexp.MustCompile(`(?i)((^|: |\(|")(` + strings.Join(list, "|") + `): )` +
		`|SQLSTATE|duplicate key|violates|pgx|pgconn|runtime error|nil pointer|<nil>|%!|goroutine|` +
		`context canceled|deadline exceeded|dial tcp|connection refused|unexpected EOF|\bEOF\b|` +
		`cannot unmarshal|json: |Go struct|\bstruct\b|\bint64\b|\bint32\b|\*string`)
}

// refusal is one way the API refuses a request, and what its problem
// must say: the fields it names (in errors and in detail) and text the
// detail or reasons must hold (the limit, the rule).
type refusal struct {
	name         string
	method, path string
	token        string // "" for none
	body         any
	hdr          []string
	status       int
	fields       []string
	says         []string
}

// Every refusal the API makes, driven through the real router on a real
// database, teaches: its detail is not empty, holds no internal word
// (package prefixes, SQL, Go types), names every refused field (which the
// errors list too, each with a reason) and states the limit or rule.
func TestProblemsTeach(t *testing.T) {
	e := newEnv(t)
	u := e.signup("teach@example.com")
	tp := "/v1/tenants/" + u.tenantID
	cred := e.createCredential(u, map[string]any{"name": "d", "acl": map[string]any{"pub": []string{"a/#"}, "sub": []string{}}})
	cid := cred["id"].(string)
	revoked := e.createCredential(u, map[string]any{"name": "r", "acl": map[string]any{"pub": []string{"a/#"}, "sub": []string{}}})
	want(t, e.do(t, "DELETE", tp+"/credentials/"+revoked["id"].(string), u.key, nil), http.StatusNoContent)
	want(t, e.do(t, "POST", tp+"/topics", u.key, map[string]any{"filter": "held/#"}), http.StatusCreated)
	for _, slug := range []string{"second", "third"} {
		want(t, e.do(t, "POST", "/v1/tenants", u.key, map[string]any{"slug": slug}), http.StatusCreated)
	}
	big := `{"slug":"` + strings.Repeat("x", 2<<20) + `"}`

	cases := []refusal{
		// The body.
		{name: "broken JSON", method: "POST", path: "/v1/tenants", token: u.key, body: `{"slug":`, status: 400, says: []string{"JSON"}},
		{name: "bad JSON", method: "POST", path: "/v1/tenants", token: u.key, body: `{"slug" "x"}`, status: 400, says: []string{"JSON", "byte"}},
		{name: "not an object", method: "POST", path: "/v1/tenants", token: u.key, body: `["x"]`, status: 400, says: []string{"object"}},
		{name: "two values", method: "POST", path: "/v1/tenants", token: u.key, body: `{"slug":"a1"} {}`, status: 400, says: []string{"single JSON"}},
		{name: "empty body", method: "POST", path: "/v1/tenants", token: u.key, body: ``, hdr: []string{"Content-Type", "application/json"}, status: 400, says: []string{"empty"}},
		{name: "media type", method: "POST", path: "/v1/tenants", token: u.key, body: `{}`, hdr: []string{"Content-Type", "text/plain"}, status: 415, says: []string{"application/json"}},
		{name: "body too large", method: "POST", path: "/v1/tenants", token: u.key, body: big, status: 413, says: []string{"1048576"}},
		{name: "wrong type", method: "POST", path: "/v1/tenants", token: u.key, body: map[string]any{"slug": 5}, status: 422, fields: []string{"slug"}, says: []string{"a string"}},
		{name: "unknown field", method: "POST", path: "/v1/signup", body: map[string]any{"email": "a@example.com", "pasword": "0123456789"}, status: 422, fields: []string{"pasword"}, says: []string{"password"}},
		{name: "unknown quota", method: "PUT", path: tp + "/quotas", token: u.key, body: map[string]any{"max_conections": 5}, status: 422, fields: []string{"max_conections"}, says: []string{"max_connections"}},

		// Field rules.
		{name: "signup", method: "POST", path: "/v1/signup", body: map[string]any{"email": "nope", "password": "short"}, status: 422, fields: []string{"email", "password"}, says: []string{"10 characters"}},
		{name: "login fields", method: "POST", path: "/v1/login", body: map[string]any{}, status: 422, fields: []string{"email", "password"}},
		{name: "slug", method: "POST", path: "/v1/tenants", token: u.key, body: map[string]any{"slug": "Bad_Slug"}, status: 422, fields: []string{"slug"}, says: []string{"63"}},
		{name: "reserved slug", method: "POST", path: "/v1/tenants", token: u.key, body: map[string]any{"slug": "api"}, status: 422, fields: []string{"slug"}, says: []string{"reserved", "choose another"}},
		{name: "plan", method: "POST", path: "/v1/tenants", token: u.key, body: map[string]any{"slug": "gold-1", "plan": "gold"}, status: 422, fields: []string{"plan"}, says: []string{"free"}},
		{name: "sample rate", method: "PATCH", path: tp, token: u.key, body: map[string]any{"trace_sample_rate": 2}, status: 422, fields: []string{"trace_sample_rate"}, says: []string{"0 to 1"}},
		{name: "acl missing", method: "POST", path: tp + "/credentials", token: u.key, body: map[string]any{"name": "d2"}, status: 422, fields: []string{"acl"}},
		{name: "acl filter", method: "POST", path: tp + "/credentials", token: u.key, body: map[string]any{"name": "d2", "acl": map[string]any{"pub": []string{"a/#/b"}}}, status: 422, fields: []string{"acl.pub[0]"}, says: []string{"#"}},
		{name: "expires", method: "POST", path: tp + "/credentials", token: u.key, body: map[string]any{"name": "d2", "acl": map[string]any{"pub": []string{"a"}}, "expires_at": "tomorrow"}, status: 422, fields: []string{"expires_at"}, says: []string{"RFC 3339"}},
		{name: "token expires", method: "POST", path: tp + "/credentials/" + cid + "/token", token: u.key, body: map[string]any{"expires_at": "2001-01-01T00:00:00Z"}, status: 422, fields: []string{"expires_at"}, says: []string{"future"}},
		{name: "quota bound", method: "PUT", path: tp + "/quotas", token: u.key, body: map[string]any{"max_connections": 0}, status: 422, fields: []string{"max_connections"}, says: []string{"between 1 and"}},
		{name: "quota type", method: "PUT", path: tp + "/quotas", token: u.key, body: map[string]any{"max_connections": "many"}, status: 422, fields: []string{"max_connections"}, says: []string{"a number"}},
		{name: "rule filter", method: "POST", path: tp + "/topics", token: u.key, body: map[string]any{"filter": "a/#/b"}, status: 422, fields: []string{"filter"}},
		{name: "rule shared", method: "POST", path: tp + "/topics", token: u.key, body: map[string]any{"filter": "$share/g/a"}, status: 422, fields: []string{"filter"}, says: []string{"$share"}},
		{name: "rule size", method: "POST", path: tp + "/topics", token: u.key, body: map[string]any{"filter": "s/#", "max_message_size": 1 << 40}, status: 422, fields: []string{"max_message_size"}, says: []string{"plan's"}},
		{name: "page limit", method: "GET", path: "/v1/tenants?limit=0", token: u.key, status: 422, fields: []string{"limit"}, says: []string{"200"}},
		{name: "cursor", method: "GET", path: tp + "/credentials?cursor=zzz", token: u.key, status: 422, fields: []string{"cursor"}},
		{name: "usage from", method: "GET", path: tp + "/usage?from=yesterday", token: u.key, status: 422, fields: []string{"from"}, says: []string{"RFC 3339"}},
		{name: "latency metric", method: "GET", path: tp + "/latency?metric=nope", token: u.key, status: 422, fields: []string{"metric"}, says: []string{"delivery"}},
		{name: "traces duration", method: "GET", path: tp + "/traces?min_duration=fast", token: u.key, status: 422, fields: []string{"min_duration"}, says: []string{"5ms"}},
		{name: "sessions state", method: "GET", path: tp + "/sessions?state=asleep", token: u.key, status: 422, fields: []string{"state"}, says: []string{"connected"}},
		{name: "publish topic", method: "POST", path: tp + "/publish", token: u.key, body: map[string]any{"topic": "a/+"}, status: 422, fields: []string{"topic"}, says: []string{"wildcards"}},
		{name: "publish qos", method: "POST", path: tp + "/publish", token: u.key, body: map[string]any{"topic": "a", "qos": 3}, status: 422, fields: []string{"qos"}, says: []string{"0, 1 or 2"}},
		{name: "budget", method: "PUT", path: "/v1/billing/budget", token: u.key, body: map[string]any{}, status: 422, fields: []string{"monthly_cents", "action"}, says: []string{"notify or cap"}},

		// Who may ask.
		{name: "no token", method: "GET", path: "/v1/tenants", status: 401, says: []string{"Authorization: Bearer"}},
		{name: "wrong password", method: "POST", path: "/v1/login", body: map[string]any{"email": "teach@example.com", "password": "not the password"}, status: 401, says: []string{"password"}},
		{name: "logout by key", method: "POST", path: "/v1/logout", token: u.key, status: 400, says: []string{"API key"}},

		// What is not there, or is taken.
		{name: "no tenant", method: "GET", path: "/v1/tenants/ten_nope", token: u.key, status: 404, says: []string{"id"}},
		{name: "no route", method: "GET", path: "/v1/nope", token: u.key, status: 404, says: []string{"openapi.json"}},
		{name: "method", method: "DELETE", path: "/v1/signup", status: 405, says: []string{"DELETE"}},
		{name: "slug taken", method: "PATCH", path: tp, token: u.key, body: map[string]any{"slug": "second"}, status: 409, fields: []string{"slug"}},
		{name: "rule taken", method: "POST", path: tp + "/topics", token: u.key, body: map[string]any{"filter": "held/#"}, status: 409, fields: []string{"filter"}},
		{name: "revoked", method: "POST", path: tp + "/credentials/" + revoked["id"].(string) + "/token", token: u.key, status: 409, says: []string{"new credential"}},

		// Plans and limits.
		{name: "paid plan", method: "POST", path: "/v1/tenants", token: u.key, body: map[string]any{"slug": "paid", "plan": "pro"}, status: 402, fields: []string{"plan"}, says: []string{"free"}},
		{name: "tenant cap", method: "POST", path: "/v1/tenants", token: u.key, body: map[string]any{"slug": "fourth"}, status: 403, says: []string{"3 tenants"}},
		{name: "no node", method: "GET", path: tp + "/sessions", token: u.key, status: 503, says: []string{"node"}},
		{name: "payment", method: "POST", path: "/v1/billing/setup-intent", token: u.key, status: 501, says: []string{"operator"}},
	}
	words := internalWords(t)
	for _, s := range []string{"shard: invalid topic name", "x: store: slug already exists", "ERROR: duplicate key value (SQLSTATE 23505)", "json: cannot unmarshal string into Go struct field"} {
		if !words.MatchString(s) {
			t.Fatalf("the denylist misses %q", s)
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.do(t, c.method, c.path, c.token, c.body, c.hdr...)
			want(t, r, c.status)
			checkTeaches(t, words, r.problem(t), c)
		})
	}

	// The account write rate, in an API of its own (its bucket is shared).
	t.Run("write rate", func(t *testing.T) {
		e := newEnv(t, writeRate(0.001, 1))
		u := e.signup("rate@example.com")
		want(t, e.do(t, "POST", "/v1/api-keys", u.key, map[string]string{"name": "one"}), http.StatusCreated)
		r := e.do(t, "POST", "/v1/api-keys", u.key, map[string]string{"name": "two"})
		want(t, r, http.StatusTooManyRequests)
		checkTeaches(t, words, r.problem(t), refusal{says: []string{"0.001 a second", "Retry-After"}})
	})
}

// checkTeaches asserts what TestProblemsTeach promises of one problem.
func checkTeaches(t *testing.T, words *regexp.Regexp, p httpapi.Problem, c refusal) {
	t.Helper()
	if p.Detail == "" {
		t.Errorf("empty detail: %+v", p)
	}
	// A validation detail is "field: reason; ...": a field may share a
	// package's name (plan, topic, acl), so its own prefix is not a chain.
	detail := p.Detail
	for _, f := range p.Errors {
		detail = strings.ReplaceAll(detail, f.Field+": ", "")
	}
	texts := []string{p.Title, detail}
	named := map[string]bool{}
	for _, f := range p.Errors {
		if f.Field == "" || f.Reason == "" {
			t.Errorf("error without a field or a reason: %+v", p.Errors)
		}
		named[f.Field] = true
		texts = append(texts, f.Reason)
	}
	for _, s := range texts {
		if m := words.FindString(s); m != "" {
			t.Errorf("%q says the internal word %q", s, m)
		}
	}
	for _, f := range c.fields {
		if !named[f] {
			t.Errorf("errors %+v do not name the field %s", p.Errors, f)
		}
		if !strings.Contains(p.Detail, f) {
			t.Errorf("detail %q does not name the field %s", p.Detail, f)
		}
	}
	all := strings.Join(append(texts, p.Detail), "\n")
	for _, s := range c.says {
		if !strings.Contains(all, s) {
			t.Errorf("problem does not say %q:\n%s", s, all)
		}
	}
}
