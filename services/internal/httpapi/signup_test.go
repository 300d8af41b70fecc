package httpapi_test

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"berth.dev/services/internal/account"
	"berth.dev/services/internal/httpapi"
)

// TestSignupDoesNotRevealEmails: a signup with an email that has an
// account gets what a new email gets (status, headers, body, byte for
// byte) after the same argon2id work, and changes nothing: the owner's
// password still logs in, the one the prober chose does not, and no rows
// are left. A taken tenant_slug is refused the same way for both.
func TestSignupDoesNotRevealEmails(t *testing.T) {
	hashes := account.NewHashLimiter(4, 5*time.Second)
	e := newEnv(t, func(o *httpapi.Options) {
		o.Accounts = account.NewService(o.Store, testParams, 15*time.Minute, 24*time.Hour, hashes)
	})
	owner := e.signup("ada@example.com")

	counts := func() (accounts, tenants, keys int) {
		t.Helper()
		if err := e.pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM accounts), (SELECT count(*) FROM tenants),
			(SELECT count(*) FROM api_keys)`).Scan(&accounts, &tenants, &keys); err != nil {
			t.Fatal(err)
		}
		return
	}
	// signup answers one signup and how many password hashes it ran.
	signup := func(body map[string]string) (resp, uint64) {
		t.Helper()
		before := hashes.Runs()
		r := e.do(t, "POST", "/v1/signup", "", body)
		return r, hashes.Runs() - before
	}
	// shape is what a client can see of an answer, but for the headers
	// that differ on every request (the auth limiter's count included).
	shape := func(r resp) (int, []string, string) {
		var hdr []string
		for k, v := range r.header {
			switch k {
			case "Date", "X-Request-Id", "X-Ratelimit-Remaining", "X-Ratelimit-Reset":
			default:
				hdr = append(hdr, k+": "+v[0])
			}
		}
		slices.Sort(hdr)
		return r.status, hdr, string(r.body)
	}

	fresh, freshHashes := signup(map[string]string{"email": "grace@example.com", "password": "a password of grace"})
	a0, t0, k0 := counts()
	for _, email := range []string{"ada@example.com", "ADA@Example.COM"} {
		taken, takenHashes := signup(map[string]string{"email": email, "password": "the prober's guess"})
		fs, fh, fb := shape(fresh)
		ts, th, tb := shape(taken)
		if fs != http.StatusAccepted || ts != fs || !slices.Equal(th, fh) || tb != fb {
			t.Fatalf("%s: signup answered %d %v %s; a new email got %d %v %s", email, ts, th, tb, fs, fh, fb)
		}
		if freshHashes != 1 || takenHashes != freshHashes {
			t.Fatalf("%s: %d password hashes, a new email %d: want one each", email, takenHashes, freshHashes)
		}
		if a, tn, k := counts(); a != a0 || tn != t0 || k != k0 {
			t.Fatalf("%s: accounts, tenants, keys %d %d %d after the signup, %d %d %d before", email, a, tn, k, a0, t0, k0)
		}
	}

	// Nothing changed for the owner; the prober's password is a wrong one.
	want(t, e.do(t, "POST", "/v1/login", "", map[string]string{"email": "ada@example.com", "password": "the prober's guess"}), http.StatusUnauthorized)
	e.login(t, "ada@example.com")
	want(t, e.do(t, "GET", "/v1/tenants/"+owner.tenantID, owner.key, nil), http.StatusOK)

	// A taken slug: the same refusal whether the email is new or not.
	var slugRefusals []string
	for _, email := range []string{"ada@example.com", "nobody@example.com"} {
		r, n := signup(map[string]string{"email": email, "password": "another password", "tenant_slug": owner.slug})
		want(t, r, http.StatusConflict)
		p := r.problem(t)
		if n != 1 || len(p.Errors) != 1 || p.Errors[0].Field != "tenant_slug" {
			t.Fatalf("%s, taken slug: %d hashes, problem %+v", email, n, p)
		}
		slugRefusals = append(slugRefusals, p.Type+" "+p.Title+" "+p.Detail)
	}
	if slugRefusals[0] != slugRefusals[1] {
		t.Fatalf("a taken slug is refused differently: %q vs %q", slugRefusals[0], slugRefusals[1])
	}
	if a, tn, k := counts(); a != a0 || tn != t0 || k != k0 {
		t.Fatalf("accounts, tenants, keys %d %d %d after the refusals, %d %d %d before", a, tn, k, a0, t0, k0)
	}
}
