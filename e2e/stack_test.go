package e2e

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"berth.dev/e2e/internal/stack"
)

// A user signs up over REST, makes a credential and talks MQTT through two
// gateways with every client we know: paho 5.0, paho 3.1.1, mosquitto.
func TestSignupToMQTTAcrossGateways(t *testing.T) {
	t.Parallel()
	s := stack.New(t, bins, stack.Options{Gateways: 2})
	a := s.Signup(t)
	if a.APIKey == "" || a.Tenant.ID == "" || !strings.HasPrefix(a.Tenant.Endpoint, a.Tenant.Slug+".") {
		t.Fatalf("signup answer %+v", a)
	}
	c := s.CreateCredential(t, a, []string{"#"}, []string{"#"}, nil)
	if c.Username != c.ID || c.Password == "" || c.MQTTAddr != s.Gateways[0].MQTT {
		t.Fatalf("credential answer %+v", c)
	}
	gw0, gw1 := s.Gateways[0].MQTT, s.Gateways[1].MQTT

	// The API (started with a key-encryption key, so its signing keys are
	// sealed) serves /metrics on its internal listener only.
	if res, err := http.Get(s.API + "/metrics"); err != nil || res.StatusCode != http.StatusNotFound {
		t.Fatalf("public /metrics: %v %v, want 404", res, err)
	} else {
		res.Body.Close()
	}
	if res, err := http.Get("http://" + s.APIMetrics + "/metrics"); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("internal /metrics: %v %v, want 200", res, err)
	} else {
		res.Body.Close()
	}

	sub := mustConnectV5(t, gw1, c, "sub-v5")
	sub.subscribe(t, "e2e/#")

	pub3, rc := connectV3(t, gw0, c, "pub-v3")
	if rc != 0 {
		t.Fatalf("3.1.1 connect: return code %d", rc)
	}
	if tok := pub3.Publish("e2e/from-v3", 1, false, "hello"); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("3.1.1 publish: %v", tok.Error())
	}
	sub.expect(t, "e2e/from-v3=hello")

	pub5 := mustConnectV5(t, gw0, c, "pub-v5")
	pub5.subscribe(t, "back/#")
	pub3.Publish("back/x", 1, false, "across").WaitTimeout(10 * time.Second)
	pub5.expect(t, "back/x=across")

	mosquittoRoundTrip(t, gw0, gw1, c, "mosq/3", "via-mosquitto-311", "mqttv311")
	mosquittoRoundTrip(t, gw1, gw0, c, "mosq/5", "via-mosquitto-5", "mqttv5")

	// The live views reach the node through the API.
	var sessions struct {
		Items []struct {
			ClientID  string `json:"client_id"`
			Connected bool   `json:"connected"`
		} `json:"items"`
	}
	if code := s.Do(t, "GET", "/v1/tenants/"+a.Tenant.ID+"/sessions", a.APIKey, nil, &sessions); code != http.StatusOK {
		t.Fatalf("sessions: status %d", code)
	}
	seen := map[string]bool{}
	for _, it := range sessions.Items {
		seen[it.ClientID] = it.Connected
	}
	if !seen["sub-v5"] || !seen["pub-v3"] {
		t.Fatalf("sessions through the API: %+v", sessions.Items)
	}
	body := map[string]any{"topic": "e2e/http", "payload": "over http", "qos": 1}
	if code := s.Do(t, "POST", "/v1/tenants/"+a.Tenant.ID+"/publish", a.APIKey, body, nil); code/100 != 2 {
		t.Fatalf("publish over HTTP: status %d", code)
	}
	sub.expect(t, "e2e/http=over http")
}

// Tenants share nothing, even with '#' and the same client id.
func TestTenantsAreIsolatedEndToEnd(t *testing.T) {
	t.Parallel()
	s := stack.New(t, bins, stack.Options{})
	a, b := s.Signup(t), s.Signup(t)
	ca := s.CreateCredential(t, a, []string{"#"}, []string{"#"}, nil)
	cb := s.CreateCredential(t, b, []string{"#"}, []string{"#"}, nil)
	gw := s.Gateways[0].MQTT
	subA := mustConnectV5(t, gw, ca, "same")
	subA.subscribe(t, "#")
	subB := mustConnectV5(t, gw, cb, "same")
	subB.subscribe(t, "#")
	pubB := mustConnectV5(t, gw, cb, "pub")
	ctx := t.Context()
	if _, err := pubB.Publish(ctx, pahoPublish("secret", "b only")); err != nil {
		t.Fatal(err)
	}
	subB.expect(t, "secret=b only")
	select {
	case m := <-subA.got:
		t.Fatalf("tenant a saw %q from tenant b", m)
	case <-time.After(500 * time.Millisecond):
	}
	// Tenant b's key cannot read tenant a.
	if code := s.Do(t, "GET", "/v1/tenants/"+a.Tenant.ID+"/sessions", b.APIKey, nil, nil); code != http.StatusNotFound {
		t.Fatalf("b reading a's sessions: status %d, want 404", code)
	}
}

// The tenant's connection limit holds across both gateways together, and
// a gateway killed with SIGKILL gives its slots back once its lease lapses.
func TestConnectionLimitIsGlobalAndSurvivesAGatewayCrash(t *testing.T) {
	t.Parallel()
	s := stack.New(t, bins, stack.Options{Gateways: 2, LeaseTTL: 2 * time.Second})
	a := s.Signup(t)
	c := s.CreateCredential(t, a, []string{"#"}, []string{"#"}, nil)
	s.SetQuota(t, a, "max_connections", 3)
	gw0, gw1 := s.Gateways[0].MQTT, s.Gateways[1].MQTT

	// The gateways learn the new limit by NOTIFY; wait for it to bite.
	var held []*v5
	held = append(held, mustConnectV5(t, gw0, c, "c1"), mustConnectV5(t, gw0, c, "c2"), mustConnectV5(t, gw1, c, "c3"))
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		cl, rc := connectV5(t, gw1, "", c, fmt.Sprintf("over-%d", i))
		if rc == 0x97 {
			break
		}
		if rc == 0 {
			held = append(held, cl) // limit not applied yet: keep it, it counts
		}
		if time.Now().After(deadline) {
			t.Fatalf("a connection over the limit of 3 is still admitted (CONNACK %#x)", rc)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(held) != 3 {
		t.Fatalf("%d connections admitted before the limit held, want 3", len(held))
	}
	if _, rc := connectV3(t, gw0, c, "over-v3"); rc != 3 {
		t.Fatalf("3.1.1 over the limit: return code %d, want 3 (server unavailable)", rc)
	}

	// gw0 holds two slots; kill it without warning.
	s.Gateways[0].Kill()
	start := time.Now()
	for admitted := 0; admitted < 2; {
		cl, rc := connectV5(t, gw1, "", c, fmt.Sprintf("after-%d", admitted))
		if rc == 0 {
			held = append(held, cl)
			admitted++
			continue
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("the dead gateway's slots were not freed within 30 s (CONNACK %#x)", rc)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("slots of the killed gateway came back after %v", time.Since(start).Round(100*time.Millisecond))
}

// A revoked credential loses its live connection and cannot connect again.
func TestRevokedCredentialIsClosedAndRefused(t *testing.T) {
	t.Parallel()
	s := stack.New(t, bins, stack.Options{})
	a := s.Signup(t)
	c := s.CreateCredential(t, a, []string{"#"}, []string{"#"}, nil)
	gw := s.Gateways[0].MQTT
	cl := mustConnectV5(t, gw, c, "doomed")
	s.Revoke(t, a, c.ID)
	select {
	case rc := <-cl.disconnected:
		if rc != 0x87 {
			t.Fatalf("revoked credential's connection ended with %#x, want DISCONNECT 0x87 (not authorized)", rc)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("connection of a revoked credential still open after 10 s")
	}
	if _, rc := connectV5(t, gw, "", c, "again"); rc != 0x87 {
		t.Fatalf("revoked credential: CONNACK %#x, want 0x87", rc)
	}
	if _, rc := connectV3(t, gw, c, "again-v3"); rc != 5 {
		t.Fatalf("revoked credential over 3.1.1: return code %d, want 5", rc)
	}
}

// Tokens that are not what the API issued for this user are refused with
// "bad user name or password".
func TestForgedAndForeignTokensAreRefused(t *testing.T) {
	t.Parallel()
	s := stack.New(t, bins, stack.Options{})
	a, b := s.Signup(t), s.Signup(t)
	ca := s.CreateCredential(t, a, []string{"#"}, []string{"#"}, nil)
	cb := s.CreateCredential(t, b, []string{"#"}, []string{"#"}, nil)
	gw := s.Gateways[0].MQTT

	parts := strings.Split(ca.Password, ".")
	none := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + parts[1] + "."
	for name, cred := range map[string]stack.Credential{
		"alg none":           {Username: ca.Username, Password: none},
		"tampered signature": {Username: ca.Username, Password: parts[0] + "." + parts[1] + "." + strings.Repeat("A", len(parts[2]))},
		"another tenant's":   {Username: ca.Username, Password: cb.Password},
		"garbage":            {Username: ca.Username, Password: "not-a-token"},
	} {
		if _, rc := connectV5(t, gw, "", cred, "forged"); rc != 0x86 {
			t.Errorf("%s token: CONNACK %#x, want 0x86", name, rc)
		}
	}
	if _, rc := connectV3(t, gw, stack.Credential{Username: ca.Username, Password: none}, "forged-v3"); rc != 4 {
		t.Errorf("alg none over 3.1.1: return code %d, want 4", rc)
	}
}

// A credential that expires (the API's shortest lifetime is a minute) works
// until then: at expiry the node ends its live connection with 0xA0
// (maximum connect time) and the gateway refuses it from then on.
func TestExpiredCredentialIsDisconnectedAndRefused(t *testing.T) {
	t.Parallel()
	s := stack.New(t, bins, stack.Options{})
	a := s.Signup(t)
	exp := time.Now().Add(61 * time.Second).Truncate(time.Second)
	c := s.CreateCredential(t, a, []string{"#"}, []string{"#"}, &exp)
	gw := s.Gateways[0].MQTT
	cl := mustConnectV5(t, gw, c, "short-lived")
	select {
	case rc := <-cl.disconnected:
		if rc != 0xA0 {
			t.Fatalf("at expiry: DISCONNECT %#x, want 0xA0", rc)
		}
		if late := time.Since(exp); late > 5*time.Second || late < -time.Second {
			t.Fatalf("disconnected %v from the expiry time", late)
		}
	case <-time.After(time.Until(exp) + 10*time.Second):
		t.Fatal("connection outlived its token by 10 s")
	}
	if _, rc := connectV5(t, gw, "", c, "expired"); rc != 0x86 {
		t.Fatalf("expired credential: CONNACK %#x, want 0x86", rc)
	}
}
