package httpapi_test

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// jwksVerifier verifies credential tokens using only the JWKS document, as
// a gateway does.
type jwksVerifier struct {
	keys map[string]ed25519.PublicKey
}

func fetchJWKS(t *testing.T, e *env) jwksVerifier {
	t.Helper()
	r := e.do(t, "GET", "/v1/.well-known/jwks.json", "", nil)
	want(t, r, http.StatusOK)
	var set struct {
		Keys []struct{ Kty, Crv, X, Kid, Alg, Use string }
	}
	r.json(t, &set)
	v := jwksVerifier{keys: map[string]ed25519.PublicKey{}}
	for _, k := range set.Keys {
		if k.Kty != "OKP" || k.Crv != "Ed25519" || k.Alg != "EdDSA" || k.Use != "sig" || k.Kid == "" {
			t.Fatalf("JWK %+v", k)
		}
		x, err := base64.RawURLEncoding.DecodeString(k.X)
		if err != nil || len(x) != ed25519.PublicKeySize {
			t.Fatalf("JWK x %q: %v", k.X, err)
		}
		v.keys[k.Kid] = x
	}
	return v
}

type tokenClaims struct {
	Iss string `json:"iss"`
	Sub string `json:"sub"`
	Tid string `json:"tid"`
	Iat int64  `json:"iat"`
	Exp *int64 `json:"exp"`
	Jti string `json:"jti"`
	ACL struct {
		Pub []string `json:"pub"`
		Sub []string `json:"sub"`
	} `json:"acl"`
}

func (v jwksVerifier) verify(token string) (tokenClaims, string, error) {
	var c tokenClaims
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return c, "", errors.New("not a compact JWS")
	}
	hb, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return c, "", err
	}
	var h struct{ Alg, Typ, Kid string }
	if err := json.Unmarshal(hb, &h); err != nil {
		return c, "", err
	}
	if h.Alg != "EdDSA" || h.Typ != "JWT" {
		return c, "", fmt.Errorf("header %+v", h)
	}
	key, ok := v.keys[h.Kid]
	if !ok {
		return c, "", fmt.Errorf("kid %q not in JWKS", h.Kid)
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return c, "", err
	}
	if !ed25519.Verify(key, []byte(parts[0]+"."+parts[1]), sig) {
		return c, "", errors.New("bad signature")
	}
	pb, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return c, "", err
	}
	return c, h.Kid, json.Unmarshal(pb, &c)
}

func TestCredentialTokenVerifiesWithJWKS(t *testing.T) {
	e := newEnv(t)
	u := e.signup("ada@example.com")
	out := e.createCredential(u, map[string]any{"name": "thermostat", "acl": map[string]any{"pub": []string{"home/+/temp"}, "sub": []string{"home/cmd/#"}}})
	for _, k := range []string{"id", "username", "password", "endpoint", "mqtt_addr"} {
		if s, _ := out[k].(string); s == "" {
			t.Fatalf("answer lacks %q: %v", k, out)
		}
	}
	if out["username"] != out["id"] || out["endpoint"] != u.slug+".mqtt.test" || out["mqtt_addr"] != "127.0.0.1:1883" {
		t.Fatalf("answer %v", out)
	}
	c, _, err := fetchJWKS(t, e).verify(out["password"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if c.Iss != "berth" || c.Sub != out["id"] || c.Tid != u.tenantID || c.Jti == "" || c.Exp != nil ||
		time.Since(time.Unix(c.Iat, 0)) > time.Minute || fmt.Sprint(c.ACL.Pub) != "[home/+/temp]" || fmt.Sprint(c.ACL.Sub) != "[home/cmd/#]" {
		t.Fatalf("claims %+v", c)
	}
	// A tampered token fails.
	parts := strings.Split(out["password"].(string), ".")
	forged := strings.Replace(parts[1], parts[1][:4], "AAAA", 1)
	if _, _, err := fetchJWKS(t, e).verify(parts[0] + "." + forged + "." + parts[2]); err == nil {
		t.Fatal("a tampered token verified")
	}

	// An expiring credential carries exp.
	exp := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Second)
	out = e.createCredential(u, map[string]any{"name": "temp", "acl": map[string]any{"pub": []string{}}, "expires_at": exp})
	c, _, err = fetchJWKS(t, e).verify(out["password"].(string))
	if err != nil || c.Exp == nil || *c.Exp != exp.Unix() {
		t.Fatalf("exp claim %v, want %d (%v)", c.Exp, exp.Unix(), err)
	}

	// The list never shows tokens.
	l := e.do(t, "GET", "/v1/tenants/"+u.tenantID+"/credentials", u.key, nil)
	want(t, l, http.StatusOK)
	if strings.Contains(string(l.body), "password") {
		t.Fatalf("list shows a token: %s", l.body)
	}
}

func TestCredentialValidation(t *testing.T) {
	e := newEnv(t)
	u := e.signup("ada@example.com")
	path := "/v1/tenants/" + u.tenantID + "/credentials"
	cases := []struct {
		name  string
		body  any
		field string
	}{
		{"no name", map[string]any{"acl": map[string]any{"pub": []string{"a"}}}, "name"},
		{"no acl", map[string]any{"name": "x"}, "acl"},
		{"hash not last", map[string]any{"name": "x", "acl": map[string]any{"pub": []string{"a/#/b"}}}, "acl.pub[0]"},
		{"plus inside level", map[string]any{"name": "x", "acl": map[string]any{"sub": []string{"ok", "a/b+/c"}}}, "acl.sub[1]"},
		{"empty filter", map[string]any{"name": "x", "acl": map[string]any{"pub": []string{""}}}, "acl.pub[0]"},
		{"nul in filter", map[string]any{"name": "x", "acl": map[string]any{"pub": []string{"a\x00b"}}}, "acl.pub[0]"},
		{"expired", map[string]any{"name": "x", "acl": map[string]any{}, "expires_at": time.Now().Add(-time.Hour)}, "expires_at"},
		{"bad time", map[string]any{"name": "x", "acl": map[string]any{}, "expires_at": "tomorrow"}, "expires_at"},
		{"unknown acl key", map[string]any{"name": "x", "acl": map[string]any{"publish": []string{"a"}}}, "publish"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.do(t, "POST", path, u.key, c.body)
			p := r.problem(t)
			if r.status != http.StatusUnprocessableEntity && r.status != http.StatusBadRequest {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			found := false
			for _, fe := range p.Errors {
				found = found || fe.Field == c.field
			}
			if !found && !strings.Contains(p.Detail, c.field) {
				t.Fatalf("problem %+v does not name %q", p, c.field)
			}
		})
	}
	// SQL metacharacters in a name are data, stored verbatim.
	name := `'); DROP TABLE credentials; --`
	out := e.createCredential(u, map[string]any{"name": name, "acl": map[string]any{"pub": []string{"a"}}})
	g := e.do(t, "GET", path+"/"+out["id"].(string), u.key, nil)
	want(t, g, http.StatusOK)
	var got struct{ Name string }
	g.json(t, &got)
	if got.Name != name {
		t.Fatalf("name %q", got.Name)
	}
}

func TestRevokeAnnounces(t *testing.T) {
	e := newEnv(t)
	u := e.signup("ada@example.com")
	out := e.createCredential(u, map[string]any{"name": "sensor", "acl": map[string]any{"pub": []string{"#"}}})
	cid := out["id"].(string)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, e.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN berth_credentials"); err != nil {
		t.Fatal(err)
	}
	want(t, e.do(t, "DELETE", "/v1/tenants/"+u.tenantID+"/credentials/"+cid, u.key, nil), http.StatusNoContent)
	n, err := conn.WaitForNotification(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n.Channel != "berth_credentials" || n.Payload != cid {
		t.Fatalf("notification %s %q, want %q", n.Channel, n.Payload, cid)
	}
	// Revoking again is fine and announces nothing new.
	want(t, e.do(t, "DELETE", "/v1/tenants/"+u.tenantID+"/credentials/"+cid, u.key, nil), http.StatusNoContent)
	g := e.do(t, "GET", "/v1/tenants/"+u.tenantID+"/credentials/"+cid, u.key, nil)
	var got struct {
		RevokedAt *time.Time `json:"revoked_at"`
	}
	g.json(t, &got)
	if got.RevokedAt == nil {
		t.Fatal("revoked_at not set")
	}
	want(t, e.do(t, "DELETE", "/v1/tenants/"+u.tenantID+"/credentials/crd_doesnotexist0000", u.key, nil), http.StatusNotFound)
}

func TestKeyRotationKeepsLiveKeysPublished(t *testing.T) {
	e := newEnv(t)
	u := e.signup("ada@example.com")
	ctx := context.Background()
	acl := map[string]any{"pub": []string{"#"}}
	forever := e.createCredential(u, map[string]any{"name": "forever", "acl": acl})
	expiring := e.createCredential(u, map[string]any{"name": "expiring", "acl": acl, "expires_at": time.Now().Add(time.Hour)})
	_, kid1, err := fetchJWKS(t, e).verify(forever["password"].(string))
	if err != nil {
		t.Fatal(err)
	}
	// Not due yet: no rotation.
	if _, rotated, err := e.keyring.Rotate(ctx, time.Hour); err != nil || rotated {
		t.Fatalf("rotated a fresh key: %v %v", rotated, err)
	}
	kid2, rotated, err := e.keyring.Rotate(ctx, 0)
	if err != nil || !rotated || kid2 == kid1 {
		t.Fatalf("rotate: %s %v %v", kid2, rotated, err)
	}
	fresh := e.createCredential(u, map[string]any{"name": "fresh", "acl": acl})
	v := fetchJWKS(t, e)
	if _, kid, err := v.verify(fresh["password"].(string)); err != nil || kid != kid2 {
		t.Fatalf("new credential: kid %s, %v", kid, err)
	}
	for _, c := range []map[string]any{forever, expiring} {
		if _, _, err := v.verify(c["password"].(string)); err != nil {
			t.Fatalf("old credential no longer verifies after rotation: %v", err)
		}
	}
	// The old key leaves the JWKS once no live credential needs it: the
	// expiring one expires, the other is revoked.
	if _, err := e.pool.Exec(ctx, `UPDATE credentials SET expires_at = now() - interval '1 second' WHERE id = $1`, expiring["id"]); err != nil {
		t.Fatal(err)
	}
	if _, ok := fetchJWKS(t, e).keys[kid1]; !ok {
		t.Fatal("old key dropped while an unexpiring credential still needs it")
	}
	want(t, e.do(t, "DELETE", "/v1/tenants/"+u.tenantID+"/credentials/"+forever["id"].(string), u.key, nil), http.StatusNoContent)
	v = fetchJWKS(t, e)
	if _, ok := v.keys[kid1]; ok {
		t.Fatal("retired key still published with no live credential")
	}
	if _, ok := v.keys[kid2]; !ok || len(v.keys) != 1 {
		t.Fatalf("JWKS %v", v.keys)
	}
}
