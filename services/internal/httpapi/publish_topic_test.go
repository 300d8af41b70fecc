package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"berth.dev/services/internal/httpapi"
)

// An HTTP publish to a server topic ($berth/..., $SYS/...) is refused as
// a validation problem on the field topic that states the rule, in words
// for users: no internal package names ("shard:", "node:").
func TestPublishToServerTopicNamesTheRule(t *testing.T) {
	e := newEnv(t)
	u := e.signup("dollar-topic@example.com")
	for _, topic := range []string{"$berth/dlq/x", "$SYS/broker/uptime", "$x"} {
		r := e.do(t, "POST", "/v1/tenants/"+u.tenantID+"/publish", u.key, map[string]any{"topic": topic, "payload": "x"})
		want(t, r, http.StatusUnprocessableEntity)
		var p httpapi.Problem
		r.json(t, &p)
		if len(p.Errors) != 1 || p.Errors[0].Field != "topic" || !strings.Contains(p.Errors[0].Reason, "must not start with $") {
			t.Errorf("%s: errors %+v, want one on topic naming the $ rule", topic, p.Errors)
		}
		for _, internal := range []string{"shard:", "node:", "store:", "httpapi:"} {
			if strings.Contains(string(r.body), internal) {
				t.Errorf("%s: answer names %q: %s", topic, internal, r.body)
			}
		}
	}
}
