package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/jackc/pgx/v5"

	"berth.dev/e2e/internal/stack"
	"berth.dev/testenv"
)

// Postgres restarted under load, on a private server the test stops and
// starts (testenv.NewPostgresServer). While it is down:
//   - the node and the gateway keep serving connected devices: QoS 1 load
//     through the gateway goes on, every PUBACKed message delivered;
//   - the API answers 503 (problem JSON), not 500, and /readyz says 503.
//
// While the node and gateway cannot reach it, Postgres comes up on its
// Unix socket only and the test changes what a NOTIFY would have
// announced while nobody listened: a credential revoked, a quota lowered.
// After the restart the quota and revocation listeners re-subscribe and
// re-read: the revoked credential's live connection is closed (0x87) and
// the lowered max_subscriptions refuses a new filter (0x97) on a
// connection that stayed up all along, with no notification sent. The
// usage flushes that failed meanwhile are retried: the tenant's usage ends
// at exactly the PUBLISH packets read and written, never more.
func TestFaultPostgresRestartUnderLoad(t *testing.T) {
	t.Parallel()
	pg := testenv.NewPostgresServer(t)
	s := stack.New(t, bins, stack.Options{DatabaseURL: pg.URL, UsageInterval: 300 * time.Millisecond, OpenPlans: "free,pro"})
	a := s.Signup(t)
	roomForLoad(t, s, a)
	c := s.CreateCredential(t, a, []string{"fault/#"}, []string{"fault/#"}, nil)
	doomed := s.CreateCredential(t, a, []string{"fault/#"}, []string{"fault/#"}, nil)
	gw := s.Gateways[0].MQTT

	watcher := mustConnectV5(t, gw, c, "pg-quota")
	watcher.subscribe(t, "fault/q/0")
	victim := mustConnectV5(t, gw, doomed, "pg-doomed")

	l := newFaultLoad(t, []string{gw}, c, "fault/pg")
	l.Subscribe("pg-sub")
	l.Publish("pg-pub", 2)
	l.WaitAcked(l.Acked()+100, 30*time.Second)

	pg.Stop(t)
	stopped := time.Now()
	l.WaitAcked(l.Acked()+200, 30*time.Second) // connected devices carry on
	apiStatus := func(path string) int {
		req, _ := http.NewRequest("GET", s.API+path, nil)
		req.Header.Set("Authorization", "Bearer "+a.APIKey)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	for _, path := range []string{"/v1/tenants/" + a.Tenant.ID, "/v1/tenants/" + a.Tenant.ID + "/credentials", "/v1/account", "/readyz"} {
		if code := apiStatus(path); code != http.StatusServiceUnavailable {
			t.Errorf("GET %s with Postgres down: %d, want 503", path, code)
		}
	}
	// The node's usage flushes fail meanwhile (and are retried later).
	deadline := time.Now().Add(15 * time.Second)
	for nodeCounter(t, s, "berth_node_usage_flush_errors_total") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no usage flush failed in 15 s with Postgres down")
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, rc := connectV5(t, gw, "", c, "pg-new")
	t.Logf("a new connection through the gateway with Postgres down: CONNACK %#x", rc)
	l.WaitAcked(l.Acked()+100, 30*time.Second)

	// Missed notifications: changed over the socket, announced to nobody.
	pg.StartLocal(t)
	func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		db, err := pgx.Connect(ctx, pg.SocketURL())
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close(ctx)
		if _, err := db.Exec(ctx, `UPDATE credentials SET revoked_at = now() WHERE id = $1`, doomed.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(ctx, `UPDATE quotas SET max_subscriptions = 1 WHERE tenant_id = $1`, a.Tenant.ID); err != nil {
			t.Fatal(err)
		}
	}()
	pg.Stop(t)
	l.WaitAcked(l.Acked()+100, 30*time.Second)
	down := time.Since(stopped)

	pg.Start(t)
	back := time.Now()
	var apiBack, revoked, quota time.Duration
	deadline = back.Add(30 * time.Second)
	for i := 1; apiBack == 0 || revoked == 0 || quota == 0; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("30 s after Postgres came back: API %v, revocation re-read %v, quota re-read %v (0: not yet)", apiBack, revoked, quota)
		}
		if apiBack == 0 && apiStatus("/v1/tenants/"+a.Tenant.ID) == http.StatusOK {
			apiBack = time.Since(back)
		}
		if revoked == 0 {
			select {
			case rc := <-victim.disconnected:
				if rc != 0x87 {
					t.Errorf("revoked credential's connection ended with %#x, want DISCONNECT 0x87", rc)
				}
				revoked = time.Since(back)
			default:
			}
		}
		if quota == 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			sa, err := watcher.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: fmt.Sprintf("fault/q/%d", i), QoS: 1}}})
			cancel()
			if err != nil && sa == nil {
				t.Fatalf("subscribe on the connection kept through the outage: %v", err)
			}
			if sa.Reasons[0] == 0x97 {
				quota = time.Since(back)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	l.WaitAcked(l.Acked()+100, 30*time.Second)
	r := l.Settle(30 * time.Second)

	// Usage: every PUBLISH read (acked, refused, or unanswered when a
	// connection broke: at most that many more) and every copy written.
	sent := int64(r.acked + r.refused)
	in, out := waitUsageAtLeast(t, s, a, sent, int64(r.received), 30*time.Second)
	if in > sent+int64(r.errored) || out != int64(r.received) {
		t.Errorf("usage %d messages in, %d out; the clients sent %d (+%d unanswered) and received %d: counted twice or lost",
			in, out, sent, r.errored, r.received)
	}
	logFault(t, "Postgres stopped under load (fast shutdown, every connection cut)", r, max(apiBack, revoked, quota),
		fmt.Sprintf("; down %v; after restart: API 200 in %v, missed revocation applied in %v, missed quota applied in %v; usage in %d, out %d exact",
			down.Round(time.Millisecond), apiBack.Round(time.Millisecond), revoked.Round(time.Millisecond), quota.Round(time.Millisecond), in, out))
}

// nodeCounter reads one unlabelled counter from the node's /metrics.
func nodeCounter(t *testing.T, s *stack.Stack, metric string) int64 {
	t.Helper()
	return nodeCounterMatch(t, s, metric, "")
}

// nodeCounterMatch sums the samples of metric on the node's /metrics
// whose labels contain match ("": the unlabelled sample).
func nodeCounterMatch(t *testing.T, s *stack.Stack, metric, match string) int64 {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+s.NodeAdmin+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+s.NodeToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("node metrics: %v", err)
	}
	defer res.Body.Close()
	return sumMetric(t, res.Body, metric, match)
}

// tenantUsage sums the tenant's usage points over the last day.
func tenantUsage(t *testing.T, s *stack.Stack, a stack.Account) (in, out int64) {
	t.Helper()
	var u struct {
		Points []struct {
			MessagesIn  int64 `json:"messages_in"`
			MessagesOut int64 `json:"messages_out"`
		} `json:"points"`
	}
	if code := s.Do(t, "GET", "/v1/tenants/"+a.Tenant.ID+"/usage?step=1h", a.APIKey, nil, &u); code != http.StatusOK {
		t.Fatalf("usage: status %d", code)
	}
	for _, p := range u.Points {
		in += p.MessagesIn
		out += p.MessagesOut
	}
	return in, out
}

// waitUsageAtLeast polls the tenant's usage until it reaches in and out,
// and then through two more flush intervals, so that a double count shows.
func waitUsageAtLeast(t *testing.T, s *stack.Stack, a stack.Account, wantIn, wantOut int64, within time.Duration) (in, out int64) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		in, out = tenantUsage(t, s, a)
		if in >= wantIn && out >= wantOut {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("usage %d in, %d out after %v; want at least %d, %d", in, out, within, wantIn, wantOut)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second) // a few more flushes (300 ms apart) would add a replayed batch
	return tenantUsage(t, s, a)
}
