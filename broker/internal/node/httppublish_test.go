package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"berth.dev/broker/packet"
)

// adminPublish posts one message to POST /publish and returns the status,
// the answer's fields and its Retry-After.
func adminPublish(t *testing.T, n *testNode, tenant, topic, payload string, retain bool) (int, map[string]any, string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"topic": topic, "payload": payload, "qos": 1, "retain": retain})
	req, _ := http.NewRequest("POST", "http://"+n.AdminAddr().String()+"/admin/tenants/"+tenant+"/publish", strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out, resp.Header.Get("Retry-After")
}

// TestHTTPPublishAdmission: HTTP publish passes the admission a device's
// PUBLISH does (size, rate, monthly and retained quotas), refusing with
// 413 or 429 and saying which quota; what it publishes counts in usage and
// against the monthly quota the tenant's devices share.
func TestHTTPPublishAdmission(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	ctx := context.Background()
	// Quotas in place before the tenants open.
	if _, err := n.pool.Exec(ctx, `UPDATE quotas SET max_msgs_per_sec = 5, max_bytes_per_sec = 1000000, max_message_size = 100,
		max_retained_messages = 1, monthly_messages = 1000000 WHERE tenant_id = 'ten_a'`); err != nil {
		t.Fatal(err)
	}
	if _, err := n.pool.Exec(ctx, `UPDATE quotas SET max_msgs_per_sec = 1000, max_bytes_per_sec = 1000000, monthly_messages = 2,
		client_msgs_per_sec = 1000 WHERE tenant_id = 'ten_b'`); err != nil {
		t.Fatal(err)
	}
	refusal := func(t *testing.T, code int, out map[string]any, wantCode int, quota string) {
		t.Helper()
		if code != wantCode || out["quota"] != quota || out["error"] == "" {
			t.Fatalf("answer %d %v, want %d for the %s quota", code, out, wantCode, quota)
		}
	}

	t.Run("size: 413", func(t *testing.T) {
		code, out, _ := adminPublish(t, n, "ten_a", "h/size", strings.Repeat("x", 101), false)
		refusal(t, code, out, http.StatusRequestEntityTooLarge, "size")
		if code, out, _ := adminPublish(t, n, "ten_a", "h/size", strings.Repeat("x", 100), false); code != http.StatusAccepted {
			t.Fatalf("100 bytes under a 100-byte quota: %d %v", code, out)
		}
	})
	t.Run("retained: 429", func(t *testing.T) {
		if code, out, _ := adminPublish(t, n, "ten_a", "h/r1", "kept", true); code != http.StatusAccepted {
			t.Fatalf("first retained: %d %v", code, out)
		}
		code, out, _ := adminPublish(t, n, "ten_a", "h/r2", "over", true)
		refusal(t, code, out, http.StatusTooManyRequests, "retained")
		if code, out, _ := adminPublish(t, n, "ten_a", "h/r1", "replaced", true); code != http.StatusAccepted {
			t.Fatalf("replacing the retained message: %d %v", code, out)
		}
	})
	t.Run("rate: 429 with Retry-After", func(t *testing.T) {
		refused := 0
		for i := range 20 {
			code, out, retry := adminPublish(t, n, "ten_a", "h/rate", fmt.Sprint(i), false)
			switch code {
			case http.StatusAccepted:
			case http.StatusTooManyRequests:
				refusal(t, code, out, http.StatusTooManyRequests, "rate")
				if retry != "1" {
					t.Fatalf("Retry-After %q, want 1", retry)
				}
				refused++
			default:
				t.Fatalf("publish %d: %d %v", i, code, out)
			}
		}
		if refused < 10 {
			t.Fatalf("%d of 20 publishes over a 5/s quota refused, want most", refused)
		}
	})
	t.Run("monthly: 429, shared with devices", func(t *testing.T) {
		got := make(chan string, 10)
		sub := n.mqtt5(t, cred{"ten_b", "crd_b", allowAll, 0}, "sub", got)
		subscribe(t, sub, "h/#")
		for i := range 2 {
			if code, out, _ := adminPublish(t, n, "ten_b", "h/m", fmt.Sprint(i), false); code != http.StatusAccepted {
				t.Fatalf("publish %d of a monthly 2: %d %v", i, code, out)
			}
			expectMsg(t, got, fmt.Sprintf("h/m=%d", i))
		}
		code, out, _ := adminPublish(t, n, "ten_b", "h/m", "third", false)
		refusal(t, code, out, http.StatusTooManyRequests, "monthly")
		if !strings.Contains(fmt.Sprint(out["error"]), "monthly") {
			t.Fatalf("detail %q does not name the monthly quota", out["error"])
		}
		// The device shares the month the API used up.
		if rc := publish(t, sub, "h/m", "device"); rc != byte(packet.ErrQuotaExceeded) {
			t.Fatalf("device PUBLISH after HTTP used the month: reason %#x, want 0x97", rc)
		}
		expectNone(t, got, 100*time.Millisecond)
		// The accepted HTTP publishes count as messages in.
		code, body := adminDo(t, n, "GET", "/admin/tenants/ten_b/usage", "")
		var u struct {
			MessagesIn uint64 `json:"messages_in"`
		}
		if err := json.Unmarshal(body, &u); code != 200 || err != nil || u.MessagesIn != 3 { // 2 HTTP + the refused device PUBLISH
			t.Fatalf("usage %d %s, want 3 messages in", code, body)
		}
	})
}
