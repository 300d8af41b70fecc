package httpapi_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"berth.dev/services/internal/httpapi"
)

// With the gateways' tenant DNS every tenant dials its own name: {slug} in
// the gateway addresses the API was given becomes the tenant's slug in
// every answer that names them (tenants, a new credential, the inspector's
// WebSocket URL), and follows a rename.
func TestEndpointsPerTenantSlug(t *testing.T) {
	e := newEnv(t, func(o *httpapi.Options) {
		o.MQTTAddr = "{slug}.mqtt.test:1883"
		o.MQTTTLSAddr = "{slug}.mqtt.test:8883"
		o.MQTTWSURL = "ws://{slug}.mqtt.test:8083/mqtt"
		o.MQTTWSSURL = "wss://{slug}.mqtt.test:8084/mqtt"
	})
	u := e.signup("ada@example.com")
	wantFor := func(slug string) string {
		return `{"mqtt":"` + slug + `.mqtt.test:1883","mqtts":"` + slug + `.mqtt.test:8883","ws":"ws://` + slug +
			`.mqtt.test:8083/mqtt","wss":"wss://` + slug + `.mqtt.test:8084/mqtt"}`
	}
	check := func(what string, r resp, status int, slug string) {
		t.Helper()
		want(t, r, status)
		var one struct {
			Slug      string          `json:"slug"`
			Endpoints json.RawMessage `json:"endpoints"`
		}
		r.json(t, &one)
		if one.Slug != slug || string(one.Endpoints) != wantFor(slug) {
			t.Fatalf("%s: slug %q endpoints %s, want %s", what, one.Slug, one.Endpoints, wantFor(slug))
		}
	}
	check("get", e.do(t, "GET", "/v1/tenants/"+u.tenantID, u.key, nil), http.StatusOK, u.slug)
	check("create", e.do(t, "POST", "/v1/tenants", u.key, map[string]string{"slug": "second"}), http.StatusCreated, "second")
	check("rename", e.do(t, "PATCH", "/v1/tenants/"+u.tenantID, u.key, map[string]string{"slug": "renamed"}), http.StatusOK, "renamed")

	out := e.createCredential(u, map[string]any{"name": "thermostat", "acl": map[string]any{"pub": []string{"t/#"}, "sub": []string{}}})
	if out["mqtt_addr"] != "renamed.mqtt.test:1883" || out["endpoint"] != "renamed.mqtt.test" {
		t.Fatalf("credential answer %v", out)
	}
	tok := e.inspectorToken(t, u, u.key, nil)
	if tok.WSURL == nil || *tok.WSURL != "wss://renamed.mqtt.test:8084/mqtt" {
		t.Fatalf("inspector ws_url %v", tok.WSURL)
	}
}
