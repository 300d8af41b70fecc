package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt3 "github.com/eclipse/paho.mqtt.golang"

	"berth.dev/e2e/internal/stack"
)

// freeTenantsPerAccount is the free plan's tenants per account
// (billing/plan; the API reference of POST /v1/tenants, README), which
// GET /v1/account reports as tenant_limit.
const freeTenantsPerAccount = 3

// overCap is how many attempts each loop makes past its cap at least;
// the session and subscription loops go on (refused) while the victim is
// measured, one attempt every keepOnEvery (well under the gateway's
// per-address connection rate), at most keepOn attempts more.
const (
	overCap     = 20
	keepOn      = 2000
	keepOnEvery = 4 * time.Millisecond
)

// going reports whether a loop at attempt i (of at least n) goes on: it
// does until n, then, paced, until stop is closed or keepOn more were
// made.
func going(i, n int64, stop <-chan struct{}) bool {
	if i < n {
		return true
	}
	select {
	case <-stop:
		return false
	case <-time.After(keepOnEvery):
		return i < n+keepOn
	}
}

// TestAttackFreeTenantCannotExhaustNode: an abuser on the free plan
// raises its quotas to the plan's bounds (and cannot go past them), then,
// all at once, loops creating persistent sessions (distinct client ids,
// each disconnected), subscriptions on one session, retained messages
// and tenants, each loop bounded at its cap + 20 attempts and in time.
// Each stops exactly at its cap with the protocol's refusal: CONNACK 0x97
// (3.1.1: 3), SUBACK 0x97, PUBACK 0x97, 403 tenant-limit. Meanwhile a
// victim tenant on the same node keeps a steady 50 QoS 1 messages a
// second to its own subscriber: every message arrives exactly once and in
// order, and its latency alone and under the abuse goes to the report
// (NOISY-NEIGHBOUR), not into an assertion: these machines are noisy.
func TestAttackFreeTenantCannotExhaustNode(t *testing.T) {
	t.Parallel()
	s := stack.New(t, bins, stack.Options{})
	gw := s.Gateways[0].MQTT
	victim, abuser := s.Signup(t), s.Signup(t)
	vc := s.CreateCredential(t, victim, []string{"#"}, []string{"#"}, nil)
	ac := s.CreateCredential(t, abuser, []string{"#"}, []string{"#"}, nil)
	bound := raiseToPlanBounds(t, s, abuser)
	for _, q := range []string{"max_sessions", "max_subscriptions", "max_retained_messages", "max_session_expiry",
		"client_msgs_per_sec", "max_msgs_per_sec", "max_connections"} {
		if bound[q] <= 0 {
			t.Fatalf("the free plan's bound of %s is %d: GET .../quotas answered no such bound", q, bound[q])
		}
	}

	// The node has the raised quotas when a session asking never to
	// expire is capped at the plan's max_session_expiry. That session is
	// the sessions loop's first.
	waitFor(t, 15*time.Second, "the abuser's raised quotas on the node", func() bool {
		cl, ack := dialV5(t, gw, "", ac, "abuse-s-0", persistent(0xFFFFFFFF))
		if ack.ReasonCode != 0 {
			t.Fatalf("abuser's first session: CONNACK %#x", ack.ReasonCode)
		}
		_ = cl.Disconnect(&paho.Disconnect{})
		p := ack.Properties
		return p != nil && p.SessionExpiryInterval != nil && int64(*p.SessionExpiryInterval) == bound["max_session_expiry"]
	})

	probe := newLatencyProbe(t, gw, vc, 3)
	const measure, every = 5 * time.Second, 60 * time.Millisecond // 3 × 16.7/s = 50/s, under the free client rate
	alone := probe.run(t, "alone", measure, every)

	// The abuser's sessions that the loops keep connected: one for the
	// subscriptions, four retained publishers (each under the client
	// rate, together under the tenant's).
	subs := mustDialV5(t, gw, ac, "abuse-subs")
	var pubs []*v5
	for k := range 4 {
		pubs = append(pubs, mustDialV5(t, gw, ac, fmt.Sprintf("abuse-ret-%d", k)))
	}
	held := 1 + len(pubs)

	// The loops run in goroutines, not parallel subtests: go test runs at
	// most GOMAXPROCS of those at once, and the victim must be measured
	// while all of them run.
	var wg sync.WaitGroup
	abuse := func(name string, loop func(t testing.TB)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			defer func() { t.Logf("abuse loop %s took %v", name, time.Since(start).Round(time.Millisecond)) }()
			loop(goT{t})
		}()
	}
	start := time.Now()
	victimDone := make(chan struct{})
	abuse("sessions", func(t testing.TB) { abuseSessions(t, s, abuser, ac, bound["max_sessions"], held, victimDone) })
	abuse("subscriptions", func(t testing.TB) { abuseSubscriptions(t, subs, bound["max_subscriptions"], victimDone) })
	abuse("retained", func(t testing.TB) {
		abuseRetained(t, s, abuser, pubs, bound["max_retained_messages"], bound["client_msgs_per_sec"], bound["max_msgs_per_sec"])
	})
	abuse("tenants", func(t testing.TB) { abuseTenants(t, s, abuser) })
	under := probe.run(t, "under-abuse", measure, every)
	close(victimDone)
	wg.Wait()
	t.Logf("the abuse took %v; the victim measured for %v of it", time.Since(start).Round(time.Millisecond), measure)
	if under.n == 0 || alone.n == 0 {
		t.Fatalf("no latency samples: alone %d, under abuse %d", alone.n, under.n)
	}
	t.Logf("NOISY-NEIGHBOUR p50 alone=%v under_abuse=%v; p99 alone=%v under_abuse=%v ratio=%.2f (samples %d, %d; reported, not asserted; the issue's bar is 1.5)",
		alone.p50, under.p50, alone.p99, under.p99, float64(under.p99)/float64(alone.p99), alone.n, under.n)
	if topics := retainedTopics(t, s, victim); len(topics) != 0 {
		t.Errorf("the victim's retained store holds %v", topics)
	}
}

// raiseToPlanBounds sets every quota of a's tenant to its plan's bound,
// checks that one past a bound is refused (422 quota-out-of-bounds), and
// returns the bounds.
func raiseToPlanBounds(t *testing.T, s *stack.Stack, a stack.Account) map[string]int64 {
	t.Helper()
	path := "/v1/tenants/" + a.Tenant.ID + "/quotas"
	var q struct {
		Plan string           `json:"plan"`
		Max  map[string]int64 `json:"max"`
	}
	if code := s.Do(t, "GET", path, a.APIKey, nil, &q); code != http.StatusOK {
		t.Fatalf("get quotas: status %d", code)
	}
	if q.Plan != "free" {
		t.Fatalf("the abuser's plan is %q, want free", q.Plan)
	}
	got := call(t, s, "PUT", path, a.APIKey, "", map[string]int64{"max_sessions": q.Max["max_sessions"] + 1})
	if got.status != http.StatusUnprocessableEntity || !strings.Contains(string(got.body), "quota-out-of-bounds") {
		t.Errorf("max_sessions one past the plan's bound: %s, want 422 quota-out-of-bounds", got)
	}
	if code := s.Do(t, "PUT", path, a.APIKey, q.Max, nil); code != http.StatusOK {
		t.Fatalf("put quotas at the plan's bounds: status %d", code)
	}
	return q.Max
}

// abuseSessions creates persistent sessions under distinct client ids,
// each disconnected at once, for max + 20 attempts and on while the victim
// is measured (going): with held sessions
// of the tenant connected throughout and its first (abuse-s-0) made
// already, exactly max - held are admitted, and every later CONNECT gets
// CONNACK 0x97, an MQTT 3.1.1 clean-session-0 one return code 3.
func abuseSessions(t testing.TB, s *stack.Stack, a stack.Account, c stack.Credential, max int64, held int, stop <-chan struct{}) {
	admitted, refused := int64(1), 0 // abuse-s-0
	deadline := time.Now().Add(90 * time.Second)
	for i := int64(1); going(i, max+overCap, stop); i++ {
		if time.Now().After(deadline) {
			t.Fatalf("the sessions loop ran out of time after %d attempts", i)
		}
		cl, ack := dialV5(t, s.Gateways[0].MQTT, "", c, fmt.Sprintf("abuse-s-%d", i), persistent(3600))
		switch ack.ReasonCode {
		case 0:
			if refused > 0 {
				t.Fatalf("session %d admitted after %d were refused: the cap let one through", i+1, refused)
			}
			admitted++
			if err := cl.Disconnect(&paho.Disconnect{}); err != nil {
				t.Fatal(err)
			}
		case 0x97:
			refused++
		default:
			t.Fatalf("session %d (%d admitted, %d refused before it): CONNACK %#x", i+1, admitted, refused, ack.ReasonCode)
		}
	}
	t.Logf("sessions: %d admitted (max_sessions %d, %d held beside), %d refused with CONNACK 0x97", admitted, max, held, refused)
	if want := max - int64(held); admitted != want {
		t.Errorf("%d persistent sessions admitted beside %d connected ones, want %d (max_sessions %d)", admitted, held, want, max)
	}
	if _, rc := connectV3With(t, s.Gateways[0].MQTT, c, "abuse-s-v3", func(o *mqtt3.ClientOptions) { o.SetCleanSession(false) }); rc != 3 {
		t.Errorf("a 3.1.1 clean-session-0 session past max_sessions: return code %d, want 3", rc)
	}
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	if code := s.Do(t, "GET", "/v1/tenants/"+a.Tenant.ID+"/sessions?limit=1000", a.APIKey, nil, &list); code != http.StatusOK {
		t.Fatalf("sessions: status %d", code)
	}
	if int64(len(list.Items)) != max {
		t.Errorf("the abuser's tenant holds %d sessions, want max_sessions %d", len(list.Items), max)
	}
}

// abuseRetained publishes retained messages to distinct topics, spread
// over pubs and paced under the client and tenant rates (so that only the
// retained cap refuses), until max + 20: exactly max are admitted, each
// publisher sees PUBACK 0x00 until the cap and 0x97 from then on, and the
// tenant's retained store holds max of them.
func abuseRetained(t testing.TB, s *stack.Stack, a stack.Account, pubs []*v5, max, clientRate, tenantRate int64) {
	perPub := (max + overCap + int64(len(pubs)) - 1) / int64(len(pubs))
	rate := min(float64(clientRate), float64(tenantRate)/float64(len(pubs))) * 0.8
	interval := time.Duration(float64(time.Second) / rate)
	codes := make([][]byte, len(pubs))
	var wg sync.WaitGroup
	for k, pub := range pubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := goT{t}
			tick := time.NewTicker(interval)
			defer tick.Stop()
			deadline := time.Now().Add(60 * time.Second)
			for j := range perPub {
				<-tick.C
				if time.Now().After(deadline) {
					t.Fatalf("the retained loop ran out of time after %d messages", j)
				}
				codes[k] = append(codes[k], pub.publishCode(t, fmt.Sprintf("abuse/ret/%d/%d", k, j), attackerMark+"retained", true))
			}
		}()
	}
	wg.Wait()
	// Accepted is any PUBACK below 0x80 (0x10: no matching subscribers).
	admitted := int64(0)
	for k, cs := range codes {
		for j, rc := range cs {
			switch {
			case rc < 0x80 && (j == 0 || cs[j-1] < 0x80):
				admitted++
				continue
			case rc == 0x97:
				continue
			}
			t.Errorf("retained publisher %d, message %d: PUBACK %#x after %d accepted and %d refused: want success until the cap, 0x97 after", k, j, rc, admitted, j-int(admitted))
			break
		}
	}
	if admitted != max {
		t.Errorf("%d retained messages admitted in a flood of %d, want max_retained_messages %d", admitted, perPub*int64(len(pubs)), max)
	}
	var held int64
	for _, topic := range retainedTopics(t, s, a) {
		if strings.HasPrefix(topic, "abuse/ret/") {
			held++
		}
	}
	if held != max {
		t.Errorf("the abuser's retained store holds %d of the flood, want %d", held, max)
	}
}

// abuseSubscriptions subscribes one session to distinct filters, max + 20
// of them and on while the victim is measured (going): the first max are
// granted (QoS 1), every later one gets SUBACK 0x97.
func abuseSubscriptions(t testing.TB, c *v5, max int64, stop <-chan struct{}) {
	deadline := time.Now().Add(60 * time.Second)
	n := int64(0)
	for i := int64(0); going(i, max+overCap, stop); i++ {
		if time.Now().After(deadline) {
			t.Fatalf("the subscriptions loop ran out of time after %d attempts", i)
		}
		want := byte(1)
		if i >= max {
			want = 0x97
		}
		if rc := c.subscribeCode(t, fmt.Sprintf("abuse/sub/%d", i)); rc != want {
			t.Fatalf("subscription %d of one session, max_subscriptions %d: SUBACK %#x, want %#x", i+1, max, rc, want)
		}
		n = i + 1
	}
	t.Logf("subscriptions: %d granted, %d refused with SUBACK 0x97", max, n-max)
}

// abuseTenants creates tenants until freeTenantsPerAccount + 20 attempts:
// the account has its first already, so exactly freeTenantsPerAccount - 1
// more are created and every later attempt gets 403 tenant-limit.
func abuseTenants(t testing.TB, s *stack.Stack, a stack.Account) {
	var acc struct {
		TenantLimit int `json:"tenant_limit"`
	}
	if code := s.Do(t, "GET", "/v1/account", a.APIKey, nil, &acc); code != http.StatusOK || acc.TenantLimit != freeTenantsPerAccount {
		t.Fatalf("GET /v1/account: status %d, tenant_limit %d, want the free plan's %d", code, acc.TenantLimit, freeTenantsPerAccount)
	}
	created := 0
	for i := range freeTenantsPerAccount + overCap {
		got := call(t, s, "POST", "/v1/tenants", a.APIKey, "", map[string]string{"slug": fmt.Sprintf("abuse-%d-%s", i, randomHexString(3))})
		switch {
		case got.status == http.StatusCreated && i < freeTenantsPerAccount-1:
			created++
		case got.status == http.StatusForbidden && strings.Contains(string(got.body), `"type":"https://berth.dev/problems/tenant-limit"`) &&
			got.contentType == "application/problem+json":
		default:
			t.Fatalf("tenant %d of an account with %d: %s, want 201 for the first %d, then 403 tenant-limit", i+2, freeTenantsPerAccount, got, freeTenantsPerAccount-1)
		}
	}
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	if code := s.Do(t, "GET", "/v1/tenants?limit=200", a.APIKey, nil, &list); code != http.StatusOK {
		t.Fatalf("tenants: status %d", code)
	}
	if created != freeTenantsPerAccount-1 || len(list.Items) != freeTenantsPerAccount {
		t.Errorf("the account created %d and has %d tenants, want %d", created, len(list.Items), freeTenantsPerAccount)
	}
}
