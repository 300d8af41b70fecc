package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"berth.dev/e2e/internal/stack"
)

// TestAttackRESTWalk calls every tenant-scoped operation of the API's own
// OpenAPI document (which services/internal/httpapi's
// TestOpenAPIMatchesRouter keeps equal to the router, so a new route is
// walked here without editing this test) as account B, with its API key
// and with its dashboard session, on account A's real ids. Each answer is
// a 404 byte-identical (same X-Request-Id) to the one for a tenant id that
// does not exist; A's ids under B's own tenant answer like ids that do not
// exist; and A's tenant, credentials, quotas, topic rules, retained
// messages and sessions are unchanged afterwards, its device undisturbed.
// Last, A makes the very same requests on its own ids and every one
// succeeds: the requests were ones the owner may make, so their 404s are
// refusals, not malformed calls.
func TestAttackRESTWalk(t *testing.T) {
	t.Parallel()
	s := stack.New(t, bins, stack.Options{})
	a, b := s.Signup(t), s.Signup(t)
	bSession := s.Login(t, b)
	ta := "/v1/tenants/" + a.Tenant.ID

	// A's real resources: a credential, a topic rule, a connected device
	// (its session), a retained message and a trace.
	cred := s.CreateCredential(t, a, []string{"#"}, []string{"#"}, nil)
	var rule struct {
		ID string `json:"id"`
	}
	if code := s.Do(t, "POST", ta+"/topics", a.APIKey, map[string]any{"filter": "victim/rule/#"}, &rule); code != http.StatusCreated || rule.ID == "" {
		t.Fatalf("create topic rule: status %d", code)
	}
	dev := mustConnectV5(t, s.Gateways[0].MQTT, cred, "victim-dev")
	dev.subscribe(t, "#")
	traceID := randomHexString(16)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := dev.Publish(ctx, &paho.Publish{Topic: "victim/retained", QoS: 1, Retain: true, Payload: []byte("keep"),
		Properties: &paho.PublishProperties{User: paho.UserProperties{{Key: "traceparent", Value: "00-" + traceID + "-a1b2c3d4e5f60718-01"}}}}); err != nil {
		t.Fatal(err)
	}
	dev.expect(t, "victim/retained=keep")
	waitFor(t, 30*time.Second, "A's trace to be stored", func() bool {
		return call(t, s, "GET", ta+"/traces/"+traceID, a.APIKey, "", nil).status == http.StatusOK
	})

	values := map[string]pathValue{
		"tenants/{tid}":       {own: a.Tenant.ID, random: newID("ten"), global: true},
		"credentials/{cid}":   {own: cred.ID, random: newID("crd"), global: true},
		"topics/{id}":         {own: rule.ID, random: newID("top"), global: true},
		"sessions/{clientid}": {own: "victim-dev", random: "nobody-" + randomHexString(4)},
		"traces/{trace_id}":   {own: traceID, random: randomHexString(16), global: true},
	}
	query := map[string]string{"filter": url.QueryEscape("victim/#")}
	ops := tenantOperations(t, s, attackBody)
	if len(ops) < 20 {
		t.Fatalf("only %d tenant-scoped operations in /v1/openapi.json", len(ops))
	}
	t.Logf("walking %d tenant-scoped operations of /v1/openapi.json", len(ops))
	before := tenantSnapshot(t, s, a)

	callers := []struct{ name, token string }{{"api-key", b.APIKey}, {"session", bSession}}
	for i, op := range ops {
		onA := withQuery(t, op, fillPath(t, op, values, func(_ string, v pathValue) string { return v.own }), query)
		noTenant := withQuery(t, op, fillPath(t, op, values, func(k string, v pathValue) string {
			if k == "tenants/{tid}" {
				return v.random
			}
			return v.own
		}), query)
		for _, c := range callers {
			rid := fmt.Sprintf("attack-%d-%s", i, c.name)
			got := call(t, s, op.Method, onA, c.token, rid, op.Body)
			missing := call(t, s, op.Method, noTenant, c.token, rid, op.Body)
			if got.status != http.StatusNotFound || missing.status != http.StatusNotFound || !sameAnswer(got, missing) {
				t.Errorf("%s as B (%s) on A's ids:\n  got      %s\n  want 404 as for a tenant that does not exist: %s", op, c.name, got, missing)
			}
		}

		// A's ids under B's own tenant are ids B does not have.
		var foreign []string
		for _, k := range pathKeys(op) {
			if k != "tenants/{tid}" && values[k].global {
				foreign = append(foreign, k)
			}
		}
		if len(foreign) == 0 {
			continue
		}
		onB := func(ownIDs bool) string {
			return withQuery(t, op, fillPath(t, op, values, func(k string, v pathValue) string {
				switch {
				case k == "tenants/{tid}":
					return b.Tenant.ID
				case ownIDs || !v.global:
					return v.own
				}
				return v.random
			}), query)
		}
		for _, c := range callers {
			rid := fmt.Sprintf("attack-%d-%s-own-tenant", i, c.name)
			got := call(t, s, op.Method, onB(true), c.token, rid, op.Body)
			missing := call(t, s, op.Method, onB(false), c.token, rid, op.Body)
			if got.status != http.StatusNotFound || !sameAnswer(got, missing) {
				t.Errorf("%s as B (%s) with A's %v under B's own tenant:\n  got      %s\n  want 404 as for ids that do not exist: %s", op, c.name, foreign, got, missing)
			}
		}
	}

	// Nothing of A's changed, and its device saw nothing from B: the next
	// message it receives is A's own marker.
	after := tenantSnapshot(t, s, a)
	for _, k := range sortedKeys(before) {
		if before[k] != after[k] {
			t.Errorf("A's GET %s%s changed under B's attack:\n  before %s\n  after  %s", ta, k, before[k], after[k])
		}
	}
	if _, err := dev.Publish(ctx, pahoPublish("victim/marker", "after the attack")); err != nil {
		t.Fatal(err)
	}
	dev.expect(t, "victim/marker=after the attack")
	select {
	case rc := <-dev.disconnected:
		t.Fatalf("A's device was disconnected (%#x) during B's attack", rc)
	default:
	}
	if t.Failed() {
		return
	}

	// The owner's control: the same requests on A's own ids succeed.
	// Deletions go last, in deleteRank's order.
	control := append([]apiOp(nil), ops...)
	sort.SliceStable(control, func(i, j int) bool { return deleteRank(control[i]) < deleteRank(control[j]) })
	for _, op := range control {
		path := withQuery(t, op, fillPath(t, op, values, func(_ string, v pathValue) string { return v.own }), query)
		if got := call(t, s, op.Method, path, a.APIKey, "", op.Body); got.status/100 != 2 {
			t.Errorf("%s as A on its own ids: %s\n  (the attack sends the owner's own request; a 404 for B means nothing unless A gets a 2xx)", op, got)
		}
	}
}

// deleteRank orders the owner's control: everything but deletions first;
// then deletions of what depends on others before those others: a
// credential's revocation deletes its sessions, and the tenant's deletion
// everything.
func deleteRank(op apiOp) int {
	switch {
	case op.Method != "DELETE":
		return 0
	case op.Path == "/v1/tenants/{tid}":
		return 3
	case strings.HasPrefix(op.Path, "/v1/tenants/{tid}/credentials/"):
		return 2
	}
	return 1
}

// attackBody is the body the suite sends for a request schema: something
// that would change A's data if it were accepted; nil lets the schema's
// minimal value stand (required members only).
func attackBody(schemaName string, _ map[string]any) any {
	switch schemaName {
	case "UpdateTenantRequest":
		return map[string]any{"slug": "stolen-" + randomHexString(4)}
	case "CreateCredentialRequest":
		return map[string]any{"name": "intruder", "acl": map[string][]string{"pub": {"#"}, "sub": {"#"}}}
	case "Quotas":
		return map[string]int64{"max_connections": 2}
	case "CreateTopicRuleRequest":
		return map[string]any{"filter": "intruder/#"}
	case "UpdateTopicRuleRequest":
		return map[string]any{"filter": "intruder/patched/#"}
	case "PublishRequest":
		return map[string]any{"topic": "victim/intruder", "payload": "from b", "qos": 1}
	case "InspectorTokenRequest":
		return map[string]bool{"publish": true}
	}
	return nil
}

// tenantSnapshot is what A reads of its tenant: the tenant, every
// credential, the quotas, the topic rules, the retained messages and the
// sessions, as the API answers them.
func tenantSnapshot(t *testing.T, s *stack.Stack, a stack.Account) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range []string{"", "/credentials?kind=all", "/quotas", "/topics", "/retained", "/sessions"} {
		got := call(t, s, "GET", "/v1/tenants/"+a.Tenant.ID+p, a.APIKey, "", nil)
		if got.status != http.StatusOK {
			t.Fatalf("A's GET %s: %s", p, got)
		}
		out[p] = string(got.body)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// waitFor polls cond every 100 ms until it holds, failing the test after
// within.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", within, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
