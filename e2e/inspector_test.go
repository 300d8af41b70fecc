package e2e

import (
	"net/http"
	"testing"
	"time"

	"berth.dev/e2e/internal/stack"
)

// inspectorToken is the answer of POST /v1/tenants/{tid}/inspector-token.
type inspectorToken struct {
	Username       string  `json:"username"`
	Password       string  `json:"password"`
	ClientIDPrefix string  `json:"client_id_prefix"`
	WSURL          *string `json:"ws_url"`
}

func mintInspector(t *testing.T, s *stack.Stack, a stack.Account, publish bool) inspectorToken {
	t.Helper()
	var tok inspectorToken
	path := "/v1/tenants/" + a.Tenant.ID + "/inspector-token"
	if code := s.Do(t, "POST", path, a.APIKey, map[string]bool{"publish": publish}, &tok); code != http.StatusCreated {
		t.Fatalf("inspector token: status %d", code)
	}
	return tok
}

// The dashboard's inspector token passes the gateway and node like a
// device's: it sees the whole tenant, publishes only when minted to, and
// its connections close when its credential is revoked. The tenant's
// endpoints and the token's ws_url name the gateway's WebSocket listener.
func TestInspectorTokenThroughGateway(t *testing.T) {
	t.Parallel()
	s := stack.New(t, bins, stack.Options{})
	a := s.Signup(t)
	gw := s.Gateways[0]

	var tn struct {
		Endpoints map[string]string `json:"endpoints"`
	}
	if code := s.Do(t, "GET", "/v1/tenants/"+a.Tenant.ID, a.APIKey, nil, &tn); code != http.StatusOK {
		t.Fatalf("get tenant: status %d", code)
	}
	wsURL := "ws://" + gw.WS + "/mqtt"
	if tn.Endpoints["mqtt"] != gw.MQTT || tn.Endpoints["ws"] != wsURL || len(tn.Endpoints) != 2 {
		t.Fatalf("endpoints %v, want mqtt %s and ws %s", tn.Endpoints, gw.MQTT, wsURL)
	}

	watcher := mintInspector(t, s, a, false)
	if watcher.WSURL == nil || *watcher.WSURL != wsURL || watcher.ClientIDPrefix == "" {
		t.Fatalf("inspector token %+v, want ws_url %s", watcher, wsURL)
	}
	insp := mustConnectV5(t, gw.MQTT, stack.Credential{Username: watcher.Username, Password: watcher.Password}, watcher.ClientIDPrefix+"watch")
	insp.subscribe(t, "#")

	dev := mustConnectV5(t, gw.MQTT, s.CreateCredential(t, a, []string{"#"}, []string{"#"}, nil), "device")
	if _, err := dev.Publish(t.Context(), pahoPublish("sensors/1/temp", "21.5")); err != nil {
		t.Fatal(err)
	}
	insp.expect(t, "sensors/1/temp=21.5")
	if r, _ := insp.Publish(t.Context(), pahoPublish("cmd/1", "no")); r == nil || r.ReasonCode != 0x87 {
		t.Fatalf("subscribe-only inspector publishing: %+v, want PUBACK 0x87", r)
	}

	talker := mintInspector(t, s, a, true)
	if talker.Username != watcher.Username {
		t.Fatalf("second mint made credential %s, want the tenant's one %s", talker.Username, watcher.Username)
	}
	pub := mustConnectV5(t, gw.MQTT, stack.Credential{Username: talker.Username, Password: talker.Password}, talker.ClientIDPrefix+"talk")
	if r, err := pub.Publish(t.Context(), pahoPublish("cmd/1", "yes")); err != nil || r.ReasonCode != 0 {
		t.Fatalf("publishing inspector: %+v %v", r, err)
	}
	insp.expect(t, "cmd/1=yes")

	// Revoking the inspector credential closes both of its connections.
	s.Revoke(t, a, watcher.Username)
	for _, cl := range []*v5{insp, pub} {
		select {
		case rc := <-cl.disconnected:
			if rc != 0x87 {
				t.Fatalf("revoked inspector's connection ended with %#x, want DISCONNECT 0x87", rc)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("inspector connection still open 10 s after its credential was revoked")
		}
	}
	if next := mintInspector(t, s, a, false); next.Username == watcher.Username {
		t.Fatal("a mint after the revocation reused the revoked credential")
	}
}
