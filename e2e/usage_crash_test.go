package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"berth.dev/e2e/internal/stack"
)

// A node killed with SIGKILL and restarted mid-minute, as the same node on
// the same data directory and ports, neither loses nor double-counts a
// usage delta it flushed: N QoS 1 messages through the gateway to one
// subscriber before the crash and M after end as exactly N+M messages in
// and N+M out in the tenant's usage, and stay so over later flushes.
//
// The design lets a crash lose the deltas counted since the node's last
// flush ("a crash loses at most the deltas since the last flush"), so the
// kill comes right after usage shows all N in and out: no message is left
// unflushed, and the exact total then says that no batch was lost or
// applied twice. The restarted node flushes into the same minute's row
// (same node id) when the minute has not turned meanwhile, which the test
// arranges by starting early in a minute.
func TestNodeCrashNeitherLosesNorDoubleCountsFlushedUsage(t *testing.T) {
	t.Parallel()
	start := time.Now()
	s := stack.New(t, bins, stack.Options{UsageInterval: 500 * time.Millisecond})
	a := s.Signup(t)
	c := s.CreateCredential(t, a, []string{"crash/#"}, []string{"crash/#"}, nil)
	gw := s.Gateways[0].MQTT

	// usage sums the tenant's usage points (1 h steps over the last day:
	// the tenant is new, so this is all of its usage).
	usage := func() (in, out int64) {
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
	// waitUsage polls until usage is exactly in/out; more than that at any
	// time is a double count.
	waitUsage := func(wantIn, wantOut int64) time.Time {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			in, out := usage()
			if in > wantIn || out > wantOut {
				t.Fatalf("usage %d in, %d out: more than the %d in, %d out published (double count)", in, out, wantIn, wantOut)
			}
			if in == wantIn && out == wantOut {
				return time.Now()
			}
			if time.Now().After(deadline) {
				t.Fatalf("usage %d in, %d out after 15 s; want %d in, %d out", in, out, wantIn, wantOut)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// round publishes n QoS 1 messages (each acknowledged) through the
	// gateway to one subscriber that receives them all; both clients are
	// fresh, non-persistent sessions, so nothing is redelivered later.
	round := func(name string, n int) {
		t.Helper()
		sub := mustConnectV5(t, gw, c, "sub-"+name)
		sub.subscribe(t, "crash/#")
		pub := mustConnectV5(t, gw, c, "pub-"+name)
		for i := range n {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := pub.Publish(ctx, &paho.Publish{Topic: "crash/" + name, QoS: 1, Payload: fmt.Appendf(nil, "m%d", i)})
			cancel()
			if err != nil {
				t.Fatalf("%s: publish %d: %v", name, i, err)
			}
			sub.expect(t, fmt.Sprintf("crash/%s=m%d", name, i))
		}
	}

	// Mid-minute: leave room for the crash and the flushes after it in
	// this minute.
	if sec := time.Now().Second(); sec > 40 {
		time.Sleep(time.Duration(61-sec) * time.Second)
	}
	const n, m = 10, 7 // within the free plan's message rate
	round("before", n)
	flushed := waitUsage(n, n)
	s.Node.Kill() // SIGKILL right after the flush that holds all N
	s.RestartNode(t)
	round("after", m)
	again := waitUsage(n+m, n+m)
	// Later flushes (of connection seconds, bytes) add no message.
	time.Sleep(2 * time.Second)
	if in, out := usage(); in != n+m || out != n+m {
		t.Fatalf("usage %d in, %d out a few flushes later; want %d, %d", in, out, n+m, n+m)
	}
	sameMinute := flushed.UTC().Truncate(time.Minute).Equal(again.UTC().Truncate(time.Minute))
	t.Logf("%d+%d messages counted exactly across the crash; same minute before and after: %v; %v in all",
		n, m, sameMinute, time.Since(start).Round(time.Millisecond))
	if el := time.Since(start); el > 60*time.Second {
		t.Fatalf("took %v, want under 60 s", el)
	}
}
