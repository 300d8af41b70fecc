package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"berth.dev/e2e/internal/stack"
)

// Deleting a tenant over REST, end to end: its devices connected through
// the gateway are disconnected at once (MQTT 5: DISCONNECT 0x87; 3.1.1:
// closed), reconnecting is refused (CONNACK 0x87; 3.1.1: return code 5),
// the node's directory of the tenant is erased, the tenant answers 404,
// and the account's usage still shows the messages the tenant exchanged.
// The node flushes usage only hourly here, so the messages can reach the
// account's usage only through the flush the deletion makes.
func TestDeletingATenantDisconnectsErasesAndKeepsUsage(t *testing.T) {
	t.Parallel()
	s := stack.New(t, bins, stack.Options{UsageInterval: time.Hour})
	a := s.Signup(t)
	c := s.CreateCredential(t, a, []string{"del/#"}, []string{"del/#"}, nil)
	gw := s.Gateways[0].MQTT
	poll := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not after 20 s", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	sub := mustConnectV5(t, gw, c, "sub")
	sub.subscribe(t, "del/#")
	pub := mustConnectV5(t, gw, c, "pub")
	v3, rc := connectV3(t, gw, c, "dev-311")
	if rc != 0 {
		t.Fatalf("3.1.1 connect: return code %d", rc)
	}
	const n = 5
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := pub.Publish(ctx, &paho.Publish{Topic: "del/x", QoS: 1, Payload: fmt.Appendf(nil, "m%d", i)})
		cancel()
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		sub.expect(t, fmt.Sprintf("del/x=m%d", i))
	}
	// The node keeps the tenant under the hex of the first 16 bytes of the
	// SHA-256 of its id (broker/internal/store.TenantDir).
	sum := sha256.Sum256([]byte(a.Tenant.ID))
	dir := filepath.Join(s.NodeData, hex.EncodeToString(sum[:16]))
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the tenant's directory on the node before the deletion: %v", err)
	}

	if code := s.Do(t, "DELETE", "/v1/tenants/"+a.Tenant.ID, a.APIKey, nil, nil); code != http.StatusNoContent {
		t.Fatalf("delete tenant: status %d", code)
	}

	for _, cl := range []struct {
		name string
		c    *v5
	}{{"subscriber", sub}, {"publisher", pub}} {
		select {
		case reason := <-cl.c.disconnected:
			if reason != 0x87 {
				t.Fatalf("%s: disconnected with %#x, want DISCONNECT 0x87 (not authorized)", cl.name, reason)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: still connected 20 s after the deletion", cl.name)
		}
	}
	poll("the 3.1.1 device closed", func() bool { return !v3.IsConnectionOpen() })

	if _, rc := connectV5(t, gw, "", c, "again"); rc != 0x87 {
		t.Fatalf("MQTT 5 reconnect after the deletion: CONNACK %#x, want 0x87", rc)
	}
	if _, rc := connectV3(t, gw, c, "again-311"); rc != 5 {
		t.Fatalf("3.1.1 reconnect after the deletion: return code %d, want 5 (not authorized)", rc)
	}
	poll("the tenant's directory erased on the node", func() bool {
		_, err := os.Stat(dir)
		return os.IsNotExist(err)
	})
	if code := s.Do(t, "GET", "/v1/tenants/"+a.Tenant.ID, a.APIKey, nil, nil); code != http.StatusNotFound {
		t.Fatalf("GET the deleted tenant: status %d, want 404", code)
	}
	if code := s.Do(t, "GET", "/v1/tenants/"+a.Tenant.ID+"/credentials", a.APIKey, nil, nil); code != http.StatusNotFound {
		t.Fatalf("GET the deleted tenant's credentials: status %d, want 404", code)
	}

	// The account's usage counts the deleted tenant's messages, exactly.
	var in, out int64
	poll("the deleted tenant's messages in the account's usage", func() bool {
		var u struct {
			Points []struct {
				MessagesIn  int64 `json:"messages_in"`
				MessagesOut int64 `json:"messages_out"`
			} `json:"points"`
		}
		if code := s.Do(t, "GET", "/v1/usage?step=1h", a.APIKey, nil, &u); code != http.StatusOK {
			t.Fatalf("account usage: status %d", code)
		}
		in, out = 0, 0
		for _, p := range u.Points {
			in += p.MessagesIn
			out += p.MessagesOut
		}
		if in > n || out > n {
			t.Fatalf("account usage %d in, %d out: more than the %d published", in, out, n)
		}
		return in == n && out == n
	})
}
