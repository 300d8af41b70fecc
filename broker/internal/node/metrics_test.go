package node

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"berth.dev/testenv"
)

// TestMetrics: GET /metrics on the admin listener answers 401 without the
// node token and the Prometheus text format with it: node-wide totals that
// follow the traffic, the WAL fsync histogram, and per-tenant series only for
// the busiest tenants.
func TestMetrics(t *testing.T) {
	t.Parallel()
	n := startNodeWith(t, testenv.DatabaseURL(t), t.TempDir(), true)
	got := make(chan string, 10)
	sub := n.mqtt5(t, cred{"ten_a", "crd_a", allowAll, 0}, "sub", got)
	subscribe(t, sub, "m/#")
	pub := n.mqtt5(t, cred{"ten_a", "crd_a", allowAll, 0}, "pub", nil)
	for i := range 4 {
		publish(t, pub, "m/x", fmt.Sprint(i))
		expectMsg(t, got, fmt.Sprintf("m/x=%d", i))
	}

	scrape := func(token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+n.AdminAddr().String()+"/metrics", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, token := range []string{"", "wrong-token-wrong-token"} {
		if code, body := scrape(token); code != http.StatusUnauthorized || strings.Contains(body, "berth_node") {
			t.Fatalf("token %q: %d %s, want 401 and no metrics", token, code, body)
		}
	}
	code, body := scrape(testToken)
	if code != http.StatusOK {
		t.Fatalf("with the token: %d %s", code, body)
	}
	// A delivery is counted once its write returns, which may be after
	// the subscriber has read it.
	poll(t, 5*time.Second, "the fourth delivery counted", func() bool {
		_, body = scrape(testToken)
		return strings.Contains(body, "\nberth_node_messages_out_total 4\n")
	})
	for _, line := range []string{
		"berth_node_connections 2",
		"berth_node_open_shards 1",
		"berth_node_messages_in_total 4",
		"berth_node_messages_out_total 4",
		`berth_node_drops_total{reason="queue_full"} 0`,
		"berth_node_usage_flush_errors_total 0",
		"berth_node_message_spans_dropped_total 0", // message-path tracing's queue
		`berth_tenant_messages_in_total{tenant_id="ten_a"} 4`,
		`berth_tenant_connections{tenant_id="ten_a"} 2`,
	} {
		if !strings.Contains(body, "\n"+line+"\n") {
			t.Errorf("no line %q in\n%s", line, body)
		}
	}
	// The span store's counters are there too (labelled by reason, so only named).
	if !strings.Contains(body, "berth_node_spans_stored_total") {
		t.Errorf("no span store counters in\n%s", body)
	}
	for _, prefix := range []string{"berth_node_bytes_in_total ", "berth_node_bytes_out_total ", "berth_node_wal_fsync_seconds_count "} {
		i := strings.Index(body, "\n"+prefix)
		if i < 0 || strings.HasPrefix(body[i+1+len(prefix):], "0\n") {
			t.Errorf("%s missing or zero in\n%s", prefix, body)
		}
	}
	// Counters never go back: a second scrape after more traffic adds to them.
	publish(t, pub, "m/x", "more")
	expectMsg(t, got, "m/x=more")
	if _, body := scrape(testToken); !strings.Contains(body, "\nberth_node_messages_in_total 5\n") {
		t.Errorf("after one more message:\n%s", body)
	}
}

// TestMetricsTenantLabelsBounded: with more open tenants than
// metricsTopTenants, only that many carry a tenant label, the busiest.
func TestMetricsTenantLabelsBounded(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	var ids []string
	for i := range metricsTopTenants + 3 {
		id := fmt.Sprintf("ten_m%02d", i)
		seedTenant(t, n.pool, id)
		ids = append(ids, id)
		cl := n.mqtt5(t, cred{id, "crd_" + id, allowAll, 0}, "c", nil)
		for range i { // tenant i publishes i messages
			publish(t, cl, "x", "y")
		}
	}
	rec := n.scrapeMetrics(t)
	if got := strings.Count(rec, "\nberth_tenant_messages_in_total{"); got != metricsTopTenants {
		t.Fatalf("%d tenants labelled, want %d:\n%s", got, metricsTopTenants, rec)
	}
	for i, id := range ids {
		labelled := strings.Contains(rec, `berth_tenant_messages_in_total{tenant_id="`+id+`"}`)
		if busiest := i >= len(ids)-metricsTopTenants; labelled != busiest {
			t.Errorf("%s (%d messages) labelled %v", id, i, labelled)
		}
	}
}

func (n *testNode) scrapeMetrics(t *testing.T) string {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+n.AdminAddr().String()+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("metrics: %d %s", resp.StatusCode, b)
	}
	return string(b)
}
