package httpapi_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"berth.dev/services/internal/store"
)

// issued is the answer of POST .../credentials/{cid}/token.
type issued struct {
	Username  string     `json:"username"`
	Password  string     `json:"password"`
	ExpiresAt *time.Time `json:"expires_at"`
}

func tokenPath(u user, cid string) string {
	return "/v1/tenants/" + u.tenantID + "/credentials/" + cid + "/token"
}

func (e *env) issueToken(t *testing.T, u user, cid string, body any) issued {
	t.Helper()
	r := e.do(t, "POST", tokenPath(u, cid), u.key, body)
	want(t, r, http.StatusCreated)
	var out issued
	r.json(t, &out)
	return out
}

// A fresh token carries the credential's claims with a new iat and jti and
// verifies with nothing but the JWKS, as a gateway or node verifies it.
func TestIssueTokenVerifiesWithJWKS(t *testing.T) {
	e := newEnv(t)
	u := e.signup("ada@example.com")
	credExp := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Second)
	in := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	acl := map[string]any{"pub": []string{"home/+/temp"}, "sub": []string{"home/cmd/#"}}
	expiring := e.createCredential(u, map[string]any{"name": "thermostat", "acl": acl, "expires_at": credExp})
	forever := e.createCredential(u, map[string]any{"name": "hub", "acl": acl})

	cases := []struct {
		name    string
		cred    map[string]any
		body    any
		wantExp *time.Time
	}{
		{"no body: the credential's expiry", expiring, nil, &credExp},
		{"empty object: the credential's expiry", expiring, map[string]any{}, &credExp},
		{"earlier than the credential", expiring, map[string]any{"expires_at": in.Format(time.RFC3339)}, &in},
		{"exactly the credential's expiry", expiring, map[string]any{"expires_at": credExp.Format(time.RFC3339)}, &credExp},
		{"no expiry stays none", forever, nil, nil},
		{"an expiry for a credential without one", forever, map[string]any{"expires_at": in.Format(time.RFC3339)}, &in},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cid := tc.cred["id"].(string)
			out := e.issueToken(t, u, cid, tc.body)
			if out.Username != cid || out.Password == "" || out.Password == tc.cred["password"] {
				t.Fatalf("answer %+v", out)
			}
			if fmt.Sprint(out.ExpiresAt) != fmt.Sprint(tc.wantExp) {
				t.Fatalf("expires_at %v, want %v", out.ExpiresAt, tc.wantExp)
			}
			v := fetchJWKS(t, e)
			c, _, err := v.verify(out.Password)
			if err != nil {
				t.Fatal(err)
			}
			orig, _, err := v.verify(tc.cred["password"].(string))
			if err != nil {
				t.Fatal(err)
			}
			if c.Iss != "berth" || c.Sub != cid || c.Tid != u.tenantID || c.Jti == "" || c.Jti == orig.Jti ||
				time.Since(time.Unix(c.Iat, 0)) > time.Minute ||
				fmt.Sprint(c.ACL.Pub) != "[home/+/temp]" || fmt.Sprint(c.ACL.Sub) != "[home/cmd/#]" {
				t.Fatalf("claims %+v", c)
			}
			switch {
			case tc.wantExp == nil && c.Exp != nil:
				t.Fatalf("exp %d, want none", *c.Exp)
			case tc.wantExp != nil && (c.Exp == nil || *c.Exp != tc.wantExp.Unix()):
				t.Fatalf("exp %v, want %d", c.Exp, tc.wantExp.Unix())
			}
		})
	}
}

// After a rotation a fresh token is signed with the new key, and the
// credential names that key, so the JWKS keeps it published after the
// next rotation retires it.
func TestIssueTokenAfterRotationStaysPublished(t *testing.T) {
	e := newEnv(t)
	u := e.signup("ada@example.com")
	ctx := context.Background()
	cred := e.createCredential(u, map[string]any{"name": "hub", "acl": map[string]any{"pub": []string{"#"}}})
	cid := cred["id"].(string)
	_, kid1, err := fetchJWKS(t, e).verify(cred["password"].(string))
	if err != nil {
		t.Fatal(err)
	}
	kid2, rotated, err := e.keyring.Rotate(ctx, 0)
	if err != nil || !rotated {
		t.Fatalf("rotate: %v %v", rotated, err)
	}
	fresh := e.issueToken(t, u, cid, nil)
	if _, kid, err := fetchJWKS(t, e).verify(fresh.Password); err != nil || kid != kid2 || kid == kid1 {
		t.Fatalf("fresh token: kid %s (was %s, active %s): %v", kid, kid1, kid2, err)
	}
	g := e.do(t, "GET", "/v1/tenants/"+u.tenantID+"/credentials/"+cid, u.key, nil)
	want(t, g, http.StatusOK)
	var got struct{ KID string }
	g.json(t, &got)
	if got.KID != kid2 {
		t.Fatalf("credential kid %q, want %q", got.KID, kid2)
	}
	if _, _, err := e.keyring.Rotate(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := fetchJWKS(t, e).verify(fresh.Password); err != nil {
		t.Fatalf("fresh token no longer verifies after the next rotation: %v", err)
	}
}

func TestIssueTokenRefusals(t *testing.T) {
	e := newEnv(t)
	u := e.signup("ada@example.com")
	ctx := context.Background()
	acl := map[string]any{"pub": []string{"#"}}
	credExp := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	live := e.createCredential(u, map[string]any{"name": "live", "acl": acl, "expires_at": credExp})["id"].(string)
	revoked := e.createCredential(u, map[string]any{"name": "revoked", "acl": acl})["id"].(string)
	want(t, e.do(t, "DELETE", "/v1/tenants/"+u.tenantID+"/credentials/"+revoked, u.key, nil), http.StatusNoContent)
	expired := e.createCredential(u, map[string]any{"name": "expired", "acl": acl, "expires_at": credExp})["id"].(string)
	if _, err := e.pool.Exec(ctx, `UPDATE credentials SET expires_at = now() - interval '1 second' WHERE id = $1`, expired); err != nil {
		t.Fatal(err)
	}
	var kidBefore string
	if err := e.pool.QueryRow(ctx, `SELECT kid FROM credentials WHERE id = $1`, revoked).Scan(&kidBefore); err != nil {
		t.Fatal(err)
	}

	at := func(d time.Duration) string { return time.Now().Add(d).UTC().Format(time.RFC3339) }
	cases := []struct {
		name   string
		cid    string
		token  string
		body   any
		status int
		slug   string // problem type after the base
		field  string // for 422
	}{
		{"revoked", revoked, u.key, nil, http.StatusConflict, "credential-revoked", ""},
		{"revoked, with a good expires_at", revoked, u.key, map[string]any{"expires_at": at(time.Minute)}, http.StatusConflict, "credential-revoked", ""},
		{"expired", expired, u.key, nil, http.StatusConflict, "credential-expired", ""},
		{"in the past", live, u.key, map[string]any{"expires_at": at(-time.Minute)}, http.StatusUnprocessableEntity, "validation", "expires_at"},
		{"now", live, u.key, map[string]any{"expires_at": at(0)}, http.StatusUnprocessableEntity, "validation", "expires_at"},
		{"after the credential's expiry", live, u.key, map[string]any{"expires_at": credExp.Add(time.Second).Format(time.RFC3339)}, http.StatusUnprocessableEntity, "validation", "expires_at"},
		{"not RFC 3339", live, u.key, map[string]any{"expires_at": "tomorrow"}, http.StatusUnprocessableEntity, "validation", "expires_at"},
		{"not a string", live, u.key, map[string]any{"expires_at": 1700000000}, http.StatusUnprocessableEntity, "validation", "expires_at"},
		{"unknown field", live, u.key, map[string]any{"exp": at(time.Minute)}, http.StatusUnprocessableEntity, "validation", "exp"},
		{"malformed JSON", live, u.key, `{"expires_at":`, http.StatusBadRequest, "malformed", ""},
		{"no such credential", "crd_doesnotexist0000", u.key, nil, http.StatusNotFound, "not-found", ""},
		{"unauthenticated", live, "", nil, http.StatusUnauthorized, "unauthenticated", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(t, "POST", tokenPath(u, tc.cid), tc.token, tc.body)
			want(t, r, tc.status)
			p := r.problem(t)
			if p.Type != "https://berth.dev/problems/"+tc.slug {
				t.Fatalf("problem type %q, want %s", p.Type, tc.slug)
			}
			if tc.field == "" {
				return
			}
			if len(p.Errors) != 1 || p.Errors[0].Field != tc.field {
				t.Fatalf("field errors %+v, want one for %q", p.Errors, tc.field)
			}
		})
	}
	// Even straight at the store, a revoked credential records no token.
	if err := e.store.RecordCredentialToken(ctx, u.tenantID, revoked, "kid-of-a-late-token"); !errors.Is(err, store.ErrRevoked) {
		t.Fatalf("record a token for a revoked credential: %v, want ErrRevoked", err)
	}
	var kidAfter string
	if err := e.pool.QueryRow(ctx, `SELECT kid FROM credentials WHERE id = $1`, revoked).Scan(&kidAfter); err != nil || kidAfter != kidBefore {
		t.Fatalf("revoked credential's kid %q, was %q (%v)", kidAfter, kidBefore, err)
	}
	// The live credential still gets tokens after all those refusals.
	e.issueToken(t, u, live, nil)
}

// Account B's key on account A's credential is 404, like an id that does
// not exist, and signs nothing for A.
func TestIssueTokenCrossTenant(t *testing.T) {
	e := newEnv(t)
	a := e.signup("a@example.com")
	b := e.signup("b@example.com")
	cid := e.createCredential(a, map[string]any{"name": "sensor", "acl": map[string]any{"pub": []string{"a/#"}}})["id"].(string)
	for _, tc := range []struct{ name, path, ghost string }{
		{"A's tenant", tokenPath(a, cid), tokenPath(user{tenantID: "ten_doesnotexist00000"}, cid)},
		{"B's tenant", tokenPath(b, cid), tokenPath(b, "crd_doesnotexist0000")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(t, "POST", tc.path, b.key, nil)
			want(t, r, http.StatusNotFound)
			g := e.do(t, "POST", tc.ghost, b.key, nil)
			want(t, g, http.StatusNotFound)
			if p, gp := r.problem(t), g.problem(t); p.Type != gp.Type || p.Title != gp.Title || p.Detail != gp.Detail {
				t.Fatalf("foreign %+v differs from missing %+v", p, gp)
			}
		})
	}
	// A's own key still works on it.
	e.issueToken(t, a, cid, nil)
}
